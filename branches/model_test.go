package branches_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// The randomized model test drives a Manager with long random sequences of
// file operations (create, write at random offsets, truncate, rename, hard
// link, symlink, chmod, remove, mkdir) and branch operations (fork, fork
// from a checkpoint, commit, abort, checkpoint, restore), and after every
// step compares every branch against a simple in-memory reference model.
//
// The model mirrors the store's merge rules at the granularity the store
// uses: an inode changed on both sides conflicts, except directories, which
// merge unless both sides changed their mode; a directory entry (dir, name)
// changed on both sides to different values conflicts. A merge that would
// leave the tree inconsistent (a directory reachable twice or not at all)
// must be refused.

var (
	modelSteps = flag.Int("model.steps", 2000, "steps per seed of the randomized model test")
	modelSeed  = flag.Uint64("model.seed", 0, "run only this seed of the randomized model test")
	modelSeeds = flag.Int("model.seeds", 5, "number of seeds of the randomized model test")
	// Reclamation and folding run in the background (a short ReclaimDelay,
	// so the interleaving varies from run to run) and as explicit,
	// reproducible steps.
	modelReclaim = flag.Duration("model.reclaim", time.Millisecond, "ReclaimDelay of the model test's manager (negative: no background reclamation and folding)")
	modelFold    = flag.Bool("model.fold", true, "run explicit Fold steps in the model test")
	modelDepth   = flag.Int("model.folddepth", 0, "FoldDepth of the model test's manager (0: default)")
)

const modelBS = 4096

// mnode is one inode of the model. Model ids are global: a forked branch
// keeps its parent's ids, as the store keeps inode numbers.
type mnode struct {
	id     int
	typ    cowfs.FileType
	mode   uint32
	data   []byte
	target string
	kids   map[string]int // directories
}

func (n *mnode) clone() *mnode {
	c := *n
	c.data = append([]byte(nil), n.data...)
	if n.kids != nil {
		c.kids = make(map[string]int, len(n.kids))
		for k, v := range n.kids {
			c.kids[k] = v
		}
	}
	return &c
}

type mstate struct{ nodes map[int]*mnode }

const modelRoot = 1

func (s *mstate) clone() *mstate {
	c := &mstate{nodes: make(map[int]*mnode, len(s.nodes))}
	for id, n := range s.nodes {
		c.nodes[id] = n.clone()
	}
	return c
}

type ekey struct {
	dir  int
	name string
}

// touches records when (global step sequence) a branch last changed an
// inode or a directory entry; what a branch changed since a point is what
// it touched after it.
type touches struct {
	ino map[int]int64
	ent map[ekey]int64
}

func newTouches() touches { return touches{ino: map[int]int64{}, ent: map[ekey]int64{}} }

func (t touches) clone() touches {
	c := newTouches()
	for k, v := range t.ino {
		c.ino[k] = v
	}
	for k, v := range t.ent {
		c.ent[k] = v
	}
	return c
}

type mcheckpoint struct {
	st   *mstate
	tch  touches
	seq  int64
	hist []seg
}

type mbranch struct {
	name        string
	parent      string // "" for main
	st          *mstate
	base        *mstate // the state it forked from
	baseSeq     int64   // when that state was the parent's
	tch         touches // changes since the fork
	invalidated bool
	// hist lists the points in time (step sequence intervals) the branch's
	// current state went through; a restore cuts it back. A child whose
	// fork point is no longer in its parent's history may get a "/"
	// conflict.
	hist []seg
	cps  map[string]mcheckpoint
}

type seg struct{ from, to int64 } // to < 0: open

func (b *mbranch) inHist(s int64) bool {
	for _, g := range b.hist {
		if g.from <= s && (g.to < 0 || s <= g.to) {
			return true
		}
	}
	return false
}

func closeHist(h []seg, at int64) []seg {
	out := append([]seg(nil), h...)
	if n := len(out); n > 0 && out[n-1].to < 0 {
		out[n-1].to = at
	}
	return out
}

type modelRun struct {
	t    *testing.T
	ctx  context.Context
	rng  *rand.Rand
	m    *branches.Manager
	seed uint64
	log  []string
	seq  int64
	next int // next model id

	br     map[string]*mbranch // live and invalidated
	inoOf  map[int]cowfs.InodeID
	nbr    int
	ncp    int
	counts map[string]int
}

func TestModel(t *testing.T) {
	seeds := []uint64{}
	if *modelSeed != 0 {
		seeds = append(seeds, *modelSeed)
	} else {
		base := uint64(time.Now().UnixNano())
		for i := 0; i < *modelSeeds; i++ {
			seeds = append(seeds, base+uint64(i)*7919)
		}
	}
	steps := *modelSteps
	if testing.Short() {
		steps /= 4
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, steps) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	st, err := kv.OpenBadger("", kv.BadgerOptions{InMemory: true, GCInterval: -1, MemTableSize: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// A short reclaim delay runs reclamation (and stack folding) in the
	// background while the test works.
	m, err := branches.Open(ctx, branches.Options{Store: st, FS: cowfs.Options{BlockSize: modelBS},
		ReclaimDelay: *modelReclaim, FoldDepth: *modelDepth})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()
	r := &modelRun{t: t, ctx: ctx, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), m: m,
		seed: seed, next: modelRoot + 1, br: map[string]*mbranch{}, inoOf: map[int]cowfs.InodeID{modelRoot: cowfs.RootIno},
		counts: map[string]int{}}
	root := &mstate{nodes: map[int]*mnode{modelRoot: {id: modelRoot, typ: cowfs.TypeDir, mode: 0o755, kids: map[string]int{}}}}
	r.br[branches.MainBranch] = &mbranch{name: branches.MainBranch, st: root, base: root.clone(), tch: newTouches(),
		cps: map[string]mcheckpoint{}, hist: []seg{{0, -1}}}
	defer func() {
		if t.Failed() {
			tail := r.log
			if len(tail) > 300 {
				tail = tail[len(tail)-300:]
			}
			t.Logf("seed %d (rerun: go test ./branches -run TestModel -model.seed %d -model.steps %d -model.fold=%v -model.reclaim=%v -model.folddepth=%d); last steps:\n%s",
				seed, seed, r.seq, *modelFold, *modelReclaim, *modelDepth, strings.Join(tail, "\n"))
		}
	}()
	for i := 0; i < steps && !t.Failed(); i++ {
		r.seq++
		touched := r.step()
		switch {
		case t.Failed():
		case touched == "" || i%25 == 0:
			r.checkAll()
		default:
			r.check(touched)
		}
	}
	if !t.Failed() {
		// A reclamation pass must not change what any branch shows.
		if _, err := m.Reclaim(ctx); err != nil {
			t.Fatalf("reclaim: %v", err)
		}
		r.checkAll()
	}
	t.Logf("seed %d: %d steps; ops %v", seed, steps, r.counts)
}

func (r *modelRun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf("%5d ", r.seq)+fmt.Sprintf(format, args...))
}

func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	r.logf("FAIL: "+format, args...)
	r.t.Errorf("seed %d step %d: "+format, append([]any{r.seed, r.seq}, args...)...)
}

func (r *modelRun) liveNames() []string {
	var out []string
	for n, b := range r.br {
		if !b.invalidated {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func (r *modelRun) pick(v []string) string { return v[r.rng.IntN(len(v))] }

// step runs one random operation. It returns the branch a file operation
// changed, or "" after a branch operation.
func (r *modelRun) step() string {
	live := r.liveNames()
	x := r.rng.IntN(103)
	switch {
	case x == 102: // rechunks files, sweeps, prunes
		r.counts["gc"]++
		st, err := r.m.GC(r.ctx)
		r.logf("gc: %d blocks swept", st.Reclaim.Blocks)
		if err != nil {
			r.fail("gc: %v", err)
		}
	case x == 100:
		r.counts["reclaim"]++
		r.logf("reclaim")
		if _, err := r.m.Reclaim(r.ctx); err != nil {
			r.fail("reclaim: %v", err)
		}
	case x == 101:
		if !*modelFold {
			return ""
		}
		r.counts["fold"]++
		n, err := r.m.Fold(r.ctx)
		r.logf("fold: %d layers", n)
		if err != nil {
			r.fail("fold: %v", err)
		}
	case x < 78 || len(live) == 0:
		b := r.pick(live)
		r.fileOp(b)
		return b
	case x < 84:
		if len(r.br) < 8 {
			r.fork(r.pick(live))
		} else {
			r.abort(r.pickAny())
		}
	case x < 90:
		// Mostly leaves, which can commit; sometimes any branch, to check
		// the refusals (main, live children).
		var leaves []string
		for _, n := range live {
			if n != branches.MainBranch && !r.hasLiveKids(n) {
				leaves = append(leaves, n)
			}
		}
		if len(leaves) > 0 && r.rng.IntN(5) > 0 {
			r.commit(r.pick(leaves))
		} else {
			r.commit(r.pick(live))
		}
	case x < 93:
		r.abort(r.pickAny())
	case x < 96:
		r.checkpoint(r.pick(live))
	case x < 98:
		r.restore(r.pick(live))
	default:
		r.forkCheckpoint(r.pick(live))
	}
	return ""
}

func (r *modelRun) hasLiveKids(name string) bool {
	for _, b := range r.br {
		if b.parent == name && !b.invalidated {
			return true
		}
	}
	return false
}

func (r *modelRun) pickAny() string {
	var all []string
	for n := range r.br {
		all = append(all, n)
	}
	sort.Strings(all)
	return r.pick(all)
}

// ---- branch operations ----

func (r *modelRun) newName() string { r.nbr++; return fmt.Sprintf("b%d", r.nbr) }

func (r *modelRun) fork(parent string) {
	name := r.newName()
	r.counts["fork"]++
	r.logf("fork %s -> %s", parent, name)
	if _, err := r.m.Fork(r.ctx, parent, name); err != nil {
		r.fail("fork %s %s: %v", parent, name, err)
		return
	}
	p := r.br[parent]
	r.br[name] = &mbranch{name: name, parent: parent, st: p.st.clone(), base: p.st.clone(), baseSeq: r.seq,
		tch: newTouches(), cps: map[string]mcheckpoint{}, hist: []seg{{r.seq, -1}}}
}

func (r *modelRun) forkCheckpoint(parent string) {
	p := r.br[parent]
	if len(p.cps) == 0 {
		r.checkpoint(parent)
		return
	}
	label := r.pickLabel(p)
	cp := p.cps[label]
	name := r.newName()
	r.counts["forkcp"]++
	r.logf("fork %s@%s -> %s", parent, label, name)
	if _, err := r.m.ForkCheckpoint(r.ctx, parent, label, name); err != nil {
		r.fail("fork checkpoint %s@%s %s: %v", parent, label, name, err)
		return
	}
	r.br[name] = &mbranch{name: name, parent: parent, st: cp.st.clone(), base: cp.st.clone(), baseSeq: cp.seq,
		tch: newTouches(), cps: map[string]mcheckpoint{}, hist: []seg{{r.seq, -1}}}
}

func (r *modelRun) pickLabel(b *mbranch) string {
	var ls []string
	for l := range b.cps {
		ls = append(ls, l)
	}
	sort.Strings(ls)
	return r.pick(ls)
}

func (r *modelRun) checkpoint(name string) {
	b := r.br[name]
	r.ncp++
	label := fmt.Sprintf("cp%d", r.ncp)
	r.counts["checkpoint"]++
	r.logf("checkpoint %s %s", name, label)
	if _, err := r.m.Checkpoint(r.ctx, name, label); err != nil {
		r.fail("checkpoint %s %s: %v", name, label, err)
		return
	}
	b.cps[label] = mcheckpoint{st: b.st.clone(), tch: b.tch.clone(), seq: r.seq, hist: closeHist(b.hist, r.seq)}
}

func (r *modelRun) restore(name string) {
	b := r.br[name]
	if len(b.cps) == 0 {
		r.checkpoint(name)
		return
	}
	label := r.pickLabel(b)
	cp := b.cps[label]
	r.counts["restore"]++
	r.logf("restore %s %s", name, label)
	if err := r.m.Restore(r.ctx, name, label); err != nil {
		r.fail("restore %s %s: %v", name, label, err)
		return
	}
	b.st, b.tch = cp.st.clone(), cp.tch.clone()
	b.hist = append(append([]seg(nil), cp.hist...), seg{r.seq, -1})
}

func (r *modelRun) descendants(name string) []string {
	var out []string
	for n, b := range r.br {
		if b.parent == name {
			out = append(out, n)
			out = append(out, r.descendants(n)...)
		}
	}
	return out
}

func (r *modelRun) abort(name string) {
	r.counts["abort"]++
	r.logf("abort %s", name)
	res, err := r.m.Abort(r.ctx, name)
	if name == branches.MainBranch {
		if !errors.Is(err, branches.ErrReadOnly) {
			r.fail("abort main: %v, want ErrReadOnly", err)
		}
		return
	}
	if err != nil {
		r.fail("abort %s: %v", name, err)
		return
	}
	want := append([]string{name}, r.descendants(name)...)
	sort.Strings(want)
	got := append([]string(nil), res.Aborted...)
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		r.fail("abort %s removed %v, want %v", name, got, want)
	}
	for _, n := range want {
		delete(r.br, n)
		if _, _, err := r.m.View(n); !errors.Is(err, branches.ErrNotFound) {
			r.fail("view of aborted %s: %v, want ErrNotFound", n, err)
		}
	}
}

type outcome int

const (
	expSuccess outcome = iota
	expConflict
	expEither
)

func (r *modelRun) commit(name string) {
	c := r.br[name]
	r.counts["commit"]++
	res, err := r.m.Commit(r.ctx, name)
	if c.parent == "" {
		r.logf("commit main")
		if !errors.Is(err, branches.ErrReadOnly) {
			r.fail("commit main: %v, want ErrReadOnly", err)
		}
		return
	}
	var kids []string
	for n, b := range r.br {
		if b.parent == name && !b.invalidated {
			kids = append(kids, n)
		}
	}
	sort.Strings(kids)
	if len(kids) > 0 {
		r.logf("commit %s (has children %v)", name, kids)
		var he *branches.HasChildrenError
		if !errors.As(err, &he) || fmt.Sprint(he.Children) != fmt.Sprint(kids) {
			r.fail("commit %s with live children %v: %v", name, kids, err)
		}
		return
	}
	p := r.br[c.parent]
	want, merged, why := r.predictMerge(c, p)
	var ce *branches.ConflictError
	switch {
	case err == nil:
		r.logf("commit %s into %s: ok fast=%v changes=%d invalidated=%v (model: %v %s)", name, c.parent,
			res.FastPath, res.Changes, res.Invalidated, want, why)
		r.counts["commit-ok"]++
		if !res.FastPath {
			r.counts["commit-merged"]++
		}
		if want == expConflict {
			r.fail("commit %s into %s succeeded, model expects a conflict: %s", name, c.parent, why)
			return
		}
		if res.FastPath && r.parentChanged(c, p) {
			r.fail("commit %s took the fast path but the parent changed since the fork", name)
		}
		if merged == nil {
			r.fail("commit %s succeeded but the merged tree is inconsistent: %s", name, why)
			return
		}
		p.st = merged
		for id := range c.tch.ino {
			p.tch.ino[id] = r.seq
		}
		for k := range c.tch.ent {
			p.tch.ent[k] = r.seq
		}
		delete(r.br, name)
		var inv []string
		for n, s := range r.br {
			if s.parent == c.parent && !s.invalidated {
				inv = append(inv, n)
				s.invalidated = true
				for _, d := range r.descendants(n) {
					if !r.br[d].invalidated {
						inv = append(inv, d)
					}
					r.br[d].invalidated = true
				}
			}
		}
		sort.Strings(inv)
		if fmt.Sprint(inv) != fmt.Sprint(res.Invalidated) {
			r.fail("commit %s invalidated %v, want %v", name, res.Invalidated, inv)
		}
	case errors.As(err, &ce):
		r.logf("commit %s into %s: conflict %v (model: %v %s)", name, c.parent, ce.Paths, want, why)
		r.counts["commit-conflict"]++
		if want == expSuccess {
			r.fail("commit %s into %s: unexpected conflict %v", name, c.parent, ce.Paths)
		}
		if len(ce.Paths) == 0 {
			r.fail("conflict error without paths")
		}
	default:
		r.logf("commit %s: %v", name, err)
		r.fail("commit %s: %v", name, err)
	}
}

// parentChanged reports whether the model says p changed since c forked.
func (r *modelRun) parentChanged(c, p *mbranch) bool {
	if !p.inHist(c.baseSeq) {
		return true
	}
	for _, s := range p.tch.ino {
		if s > c.baseSeq {
			return true
		}
	}
	for _, s := range p.tch.ent {
		if s > c.baseSeq {
			return true
		}
	}
	return false
}

func entryVal(st *mstate, k ekey) int {
	if d, ok := st.nodes[k.dir]; ok && d.kids != nil {
		return d.kids[k.name]
	}
	return 0
}

// predictMerge applies the store's merge rules to the model. It returns
// the expected outcome, the merged state when the merge is consistent, and
// a reason.
func (r *modelRun) predictMerge(c, p *mbranch) (outcome, *mstate, string) {
	out := expSuccess
	var why []string
	if !p.inHist(c.baseSeq) {
		out = expEither
		why = append(why, "parent restored past the fork point")
	}
	for id := range c.tch.ino {
		if p.tch.ino[id] <= c.baseSeq {
			continue
		}
		cn, pn, bn := c.st.nodes[id], p.st.nodes[id], c.base.nodes[id]
		if cn != nil && pn != nil && cn.typ == cowfs.TypeDir && pn.typ == cowfs.TypeDir && bn != nil {
			if cn.mode != bn.mode && pn.mode != bn.mode {
				return expConflict, nil, fmt.Sprintf("dir %d mode changed on both sides", id)
			}
			continue
		}
		return expConflict, nil, fmt.Sprintf("inode %d changed on both sides", id)
	}
	for k := range c.tch.ent {
		if p.tch.ent[k] <= c.baseSeq {
			continue
		}
		cv, pv, bv := entryVal(c.st, k), entryVal(p.st, k), entryVal(c.base, k)
		if cv == pv {
			continue
		}
		if (cv == 0 || pv == 0) && bv == 0 {
			// A name created and removed again may leave no record.
			out = expEither
			why = append(why, fmt.Sprintf("entry %v created/removed", k))
			continue
		}
		return expConflict, nil, fmt.Sprintf("entry %d/%s changed on both sides", k.dir, k.name)
	}
	m := p.st.clone()
	for id := range c.tch.ino {
		cn := c.st.nodes[id]
		if cn == nil {
			delete(m.nodes, id)
			continue
		}
		if pn := m.nodes[id]; pn != nil && pn.typ == cowfs.TypeDir && cn.typ == cowfs.TypeDir {
			if bn := c.base.nodes[id]; bn == nil || cn.mode != bn.mode {
				pn.mode = cn.mode
			}
			continue
		}
		n := cn.clone()
		if n.typ == cowfs.TypeDir {
			if pn := m.nodes[id]; pn != nil && pn.kids != nil {
				n.kids = pn.kids
			} else {
				n.kids = map[string]int{}
			}
		}
		m.nodes[id] = n
	}
	for k := range c.tch.ent {
		d := m.nodes[k.dir]
		if d == nil || d.kids == nil {
			continue
		}
		if entryVal(c.st, k) == 0 && entryVal(c.base, k) == 0 {
			// Created and removed again in the child: when the merge
			// succeeds the child left no record, and the parent's value
			// stays.
			continue
		}
		if v := entryVal(c.st, k); v != 0 {
			d.kids[k.name] = v
		} else {
			delete(d.kids, k.name)
		}
	}
	if err := consistent(m); err != nil {
		if out == expEither {
			return expEither, nil, strings.Join(append(why, err.Error()), "; ")
		}
		return expConflict, nil, "merged tree inconsistent: " + err.Error()
	}
	return out, m, strings.Join(why, "; ")
}

// consistent checks that every directory of st is reachable exactly once
// from the root, and every entry names an existing node.
func consistent(st *mstate) error {
	seen := map[int]bool{}
	var walk func(id int, p string) error
	walk = func(id int, p string) error {
		n := st.nodes[id]
		if n == nil {
			return fmt.Errorf("%s names a missing inode %d", p, id)
		}
		if n.typ != cowfs.TypeDir {
			return nil
		}
		if seen[id] {
			return fmt.Errorf("directory %d reachable twice (again at %s)", id, p)
		}
		seen[id] = true
		for name, k := range n.kids {
			if err := walk(k, p+"/"+name); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(modelRoot, ""); err != nil {
		return err
	}
	for id, n := range st.nodes {
		if n.typ == cowfs.TypeDir && !seen[id] {
			return fmt.Errorf("directory %d unreachable", id)
		}
	}
	return nil
}

// ---- file operations ----

type mpath struct {
	path string
	dir  int // parent directory id
	name string
	id   int
}

// paths lists every path of st (root excluded), in a stable order.
func paths(st *mstate) []mpath {
	var out []mpath
	var walk func(dir int, p string)
	walk = func(dir int, p string) {
		d := st.nodes[dir]
		names := make([]string, 0, len(d.kids))
		for n := range d.kids {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			id := d.kids[n]
			pp := path.Join(p, n)
			out = append(out, mpath{path: pp, dir: dir, name: n, id: id})
			if c := st.nodes[id]; c != nil && c.typ == cowfs.TypeDir {
				walk(id, pp)
			}
		}
	}
	walk(modelRoot, "")
	return out
}

var modelNames = []string{"a", "b", "c", "d", "e", "f", "g"}

func (r *modelRun) pickOf(st *mstate, want func(*mnode) bool) (mpath, bool) {
	var c []mpath
	for _, p := range paths(st) {
		if want(st.nodes[p.id]) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		return mpath{}, false
	}
	return c[r.rng.IntN(len(c))], true
}

func isType(t cowfs.FileType) func(*mnode) bool { return func(n *mnode) bool { return n.typ == t } }

// pickDir returns a random directory (root included) and its path.
func (r *modelRun) pickDir(st *mstate) (int, string) {
	if r.rng.IntN(3) == 0 {
		return modelRoot, ""
	}
	if p, ok := r.pickOf(st, isType(cowfs.TypeDir)); ok && strings.Count(p.path, "/") < 3 {
		return p.id, p.path
	}
	return modelRoot, ""
}

// newSlot picks a directory and a name; the name may exist.
func (r *modelRun) newSlot(st *mstate) (int, string, string) {
	d, dp := r.pickDir(st)
	n := modelNames[r.rng.IntN(len(modelNames))]
	return d, n, path.Join(dp, n)
}

func (b *mbranch) touchIno(seq int64, ids ...int) {
	for _, id := range ids {
		b.tch.ino[id] = seq
	}
}

func (b *mbranch) touchEnt(seq int64, dir int, name string) { b.tch.ent[ekey{dir, name}] = seq }

func (r *modelRun) newID() int { r.next++; return r.next }

func (r *modelRun) fileOp(name string) {
	b := r.br[name]
	fs, _, err := r.m.View(name)
	if err != nil {
		r.fail("view %s: %v", name, err)
		return
	}
	bf := fs.Billy()
	st := b.st
	x := r.rng.IntN(100)
	switch {
	case x < 14: // create a file (or fail on an existing name)
		d, n, p := r.newSlot(st)
		mode := uint32(0o600 + r.rng.IntN(0o200))
		r.logf("%s: create %s %o", name, p, mode)
		r.counts["create"]++
		f, err := bf.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(mode))
		if _, exists := st.nodes[d].kids[n]; exists {
			if !errors.Is(err, os.ErrExist) {
				r.fail("create existing %s: %v, want EEXIST", p, err)
			}
			return
		}
		if err != nil {
			r.fail("create %s: %v", p, err)
			return
		}
		data := r.randData(r.rng.IntN(3 * modelBS))
		if _, err := f.Write(data); err != nil {
			r.fail("write %s: %v", p, err)
		}
		f.Close()
		id := r.newID()
		st.nodes[id] = &mnode{id: id, typ: cowfs.TypeRegular, mode: mode, data: data}
		st.nodes[d].kids[n] = id
		b.touchIno(r.seq, id, d)
		b.touchEnt(r.seq, d, n)
	case x < 36: // write at a random offset
		p, ok := r.pickOf(st, isType(cowfs.TypeRegular))
		if !ok {
			return
		}
		n := st.nodes[p.id]
		off := r.offset(len(n.data))
		data := r.randData(1 + r.rng.IntN(2*modelBS+3))
		r.logf("%s: write %s off %d len %d (size %d)", name, p.path, off, len(data), len(n.data))
		r.counts["write"]++
		f, err := bf.OpenFile(p.path, os.O_RDWR, 0)
		if err != nil {
			r.fail("open %s: %v", p.path, err)
			return
		}
		if _, err := f.(io.WriterAt).WriteAt(data, int64(off)); err != nil {
			r.fail("writeat %s: %v", p.path, err)
		}
		f.Close()
		if end := off + len(data); end > len(n.data) {
			n.data = append(n.data, make([]byte, end-len(n.data))...)
		}
		copy(n.data[off:], data)
		b.touchIno(r.seq, p.id)
	case x < 46: // truncate
		p, ok := r.pickOf(st, isType(cowfs.TypeRegular))
		if !ok {
			return
		}
		n := st.nodes[p.id]
		size := r.offset(len(n.data))
		if r.rng.IntN(2) == 0 {
			size = r.rng.IntN(len(n.data) + 1)
		}
		r.logf("%s: truncate %s %d (size %d)", name, p.path, size, len(n.data))
		r.counts["truncate"]++
		f, err := bf.OpenFile(p.path, os.O_RDWR, 0)
		if err != nil {
			r.fail("open %s: %v", p.path, err)
			return
		}
		if err := f.Truncate(int64(size)); err != nil {
			r.fail("truncate %s: %v", p.path, err)
		}
		f.Close()
		if size < len(n.data) {
			n.data = n.data[:size]
		} else {
			n.data = append(n.data, make([]byte, size-len(n.data))...)
		}
		b.touchIno(r.seq, p.id)
	case x < 54: // mkdir
		d, n, p := r.newSlot(st)
		r.logf("%s: mkdir %s", name, p)
		r.counts["mkdir"]++
		_, err := fs.Mkdir(r.inoOf[d], n, cowfs.NewAttr{Mode: 0o755})
		if _, exists := st.nodes[d].kids[n]; exists {
			if !errors.Is(err, os.ErrExist) {
				r.fail("mkdir existing %s: %v, want EEXIST", p, err)
			}
			return
		}
		if err != nil {
			r.fail("mkdir %s: %v", p, err)
			return
		}
		id := r.newID()
		st.nodes[id] = &mnode{id: id, typ: cowfs.TypeDir, mode: 0o755, kids: map[string]int{}}
		st.nodes[d].kids[n] = id
		b.touchIno(r.seq, id, d)
		b.touchEnt(r.seq, d, n)
	case x < 60: // symlink
		d, n, p := r.newSlot(st)
		target := []string{"a", "../b/c", "/abs/path", "d/e/f", strings.Repeat("x", 100)}[r.rng.IntN(5)]
		r.logf("%s: symlink %s -> %s", name, p, target)
		r.counts["symlink"]++
		err := bf.Symlink(target, p)
		if _, exists := st.nodes[d].kids[n]; exists {
			if !errors.Is(err, os.ErrExist) {
				r.fail("symlink over existing %s: %v, want EEXIST", p, err)
			}
			return
		}
		if err != nil {
			r.fail("symlink %s: %v", p, err)
			return
		}
		id := r.newID()
		st.nodes[id] = &mnode{id: id, typ: cowfs.TypeSymlink, mode: 0o777, target: target}
		st.nodes[d].kids[n] = id
		b.touchIno(r.seq, id, d)
		b.touchEnt(r.seq, d, n)
	case x < 66: // hard link
		src, ok := r.pickOf(st, isType(cowfs.TypeRegular))
		if !ok {
			return
		}
		d, n, p := r.newSlot(st)
		r.logf("%s: link %s -> %s", name, p, src.path)
		r.counts["link"]++
		err := bf.Link(src.path, p)
		if _, exists := st.nodes[d].kids[n]; exists {
			if !errors.Is(err, os.ErrExist) {
				r.fail("link over existing %s: %v, want EEXIST", p, err)
			}
			return
		}
		if err != nil {
			r.fail("link %s %s: %v", src.path, p, err)
			return
		}
		st.nodes[d].kids[n] = src.id
		b.touchIno(r.seq, src.id, d)
		b.touchEnt(r.seq, d, n)
	case x < 73: // chmod
		p, ok := r.pickOf(st, func(n *mnode) bool { return n.typ != cowfs.TypeSymlink })
		if !ok {
			return
		}
		mode := uint32(r.rng.IntN(0o1000))
		gm := os.FileMode(mode)
		if r.rng.IntN(4) == 0 {
			mode |= cowfs.ModeSetuid
			gm |= os.ModeSetuid
		}
		if r.rng.IntN(4) == 0 {
			mode |= cowfs.ModeSetgid
			gm |= os.ModeSetgid
		}
		if r.rng.IntN(4) == 0 {
			mode |= cowfs.ModeSticky
			gm |= os.ModeSticky
		}
		r.logf("%s: chmod %s %o", name, p.path, mode)
		r.counts["chmod"]++
		if err := bf.Chmod(p.path, gm); err != nil {
			r.fail("chmod %s: %v", p.path, err)
			return
		}
		st.nodes[p.id].mode = mode
		b.touchIno(r.seq, p.id)
	case x < 83: // remove
		p, ok := r.pickOf(st, func(*mnode) bool { return true })
		if !ok {
			return
		}
		n := st.nodes[p.id]
		r.logf("%s: remove %s", name, p.path)
		r.counts["remove"]++
		err := bf.Remove(p.path)
		if n.typ == cowfs.TypeDir && len(n.kids) > 0 {
			if !errors.Is(err, syscall.ENOTEMPTY) {
				r.fail("remove non-empty dir %s: %v, want ENOTEMPTY", p.path, err)
			}
			return
		}
		if err != nil {
			r.fail("remove %s: %v", p.path, err)
			return
		}
		r.unlink(b, p.dir, p.name)
	default: // rename
		src, ok := r.pickOf(st, func(*mnode) bool { return true })
		if !ok {
			return
		}
		d, n, p := r.newSlot(st)
		r.counts["rename"]++
		r.logf("%s: rename %s -> %s", name, src.path, p)
		err := bf.Rename(src.path, p)
		want := r.renameErr(st, src, d, n)
		if want != nil {
			if !errors.Is(err, want) {
				r.fail("rename %s %s: %v, want %v", src.path, p, err, want)
			}
			return
		}
		if err != nil {
			r.fail("rename %s %s: %v", src.path, p, err)
			return
		}
		dst := st.nodes[d].kids[n]
		if dst == src.id {
			return // same inode: POSIX rename does nothing
		}
		if dst != 0 {
			r.unlink(b, d, n)
		}
		delete(st.nodes[src.dir].kids, src.name)
		st.nodes[d].kids[n] = src.id
		b.touchIno(r.seq, src.id, src.dir, d)
		b.touchEnt(r.seq, src.dir, src.name)
		b.touchEnt(r.seq, d, n)
	}
}

// renameErr returns the error POSIX rename gives, or nil.
func (r *modelRun) renameErr(st *mstate, src mpath, d int, n string) error {
	sn := st.nodes[src.id]
	if sn.typ == cowfs.TypeDir {
		// Moving a directory into itself or a descendant.
		for _, p := range paths(st) {
			if p.id == d && strings.HasPrefix(p.path+"/", src.path+"/") {
				return syscall.EINVAL
			}
		}
		if d == src.id {
			return syscall.EINVAL
		}
	}
	dst, ok := st.nodes[d].kids[n]
	if !ok || dst == src.id {
		return nil
	}
	dn := st.nodes[dst]
	switch {
	case sn.typ == cowfs.TypeDir && dn.typ != cowfs.TypeDir:
		return syscall.ENOTDIR
	case sn.typ != cowfs.TypeDir && dn.typ == cowfs.TypeDir:
		return syscall.EISDIR
	case dn.typ == cowfs.TypeDir && len(dn.kids) > 0:
		return syscall.ENOTEMPTY
	}
	return nil
}

// unlink removes entry dir/name from b's model, dropping the inode when its
// last link goes.
func (r *modelRun) unlink(b *mbranch, dir int, name string) {
	st := b.st
	id := st.nodes[dir].kids[name]
	delete(st.nodes[dir].kids, name)
	b.touchIno(r.seq, id, dir)
	b.touchEnt(r.seq, dir, name)
	if links(st)[id] == 0 {
		delete(st.nodes, id)
	}
}

func links(st *mstate) map[int]int {
	out := map[int]int{}
	for _, n := range st.nodes {
		for _, k := range n.kids {
			out[k]++
		}
	}
	return out
}

// offset picks a write or truncate offset, biased to block boundaries, the
// end of the file and beyond it.
func (r *modelRun) offset(size int) int {
	switch r.rng.IntN(5) {
	case 0:
		return r.rng.IntN(size + 1)
	case 1:
		return size
	case 2:
		return size + r.rng.IntN(2*modelBS)
	case 3:
		b := r.rng.IntN(size/modelBS+2) * modelBS
		return max(0, b+r.rng.IntN(5)-2)
	}
	return r.rng.IntN(4 * modelBS)
}

func (r *modelRun) randData(n int) []byte {
	p := make([]byte, n)
	switch r.rng.IntN(3) {
	case 0:
		for i := range p {
			p[i] = byte(r.rng.IntN(256))
		}
	case 1: // repeated blocks, to exercise content dedup
		c := byte('A' + r.rng.IntN(3))
		for i := range p {
			p[i] = c
		}
	default:
		for i := range p {
			p[i] = byte(i % 251)
		}
	}
	return p
}

// ---- checking ----

func (r *modelRun) checkAll() {
	for _, n := range r.liveNames() {
		r.check(n)
		if r.t.Failed() {
			return
		}
	}
	for n, b := range r.br {
		if b.invalidated {
			if _, _, err := r.m.View(n); !errors.Is(err, branches.ErrInvalidated) {
				r.fail("view of invalidated %s: %v, want ErrInvalidated", n, err)
			}
		}
	}
}

func (r *modelRun) check(name string) {
	b := r.br[name]
	fs, _, err := r.m.View(name)
	if err != nil {
		r.fail("view %s: %v", name, err)
		return
	}
	bf := fs.Billy()
	st := b.st
	nl := links(st)
	byIno := map[cowfs.InodeID]int{}
	pathsOf := map[int][]string{}
	for _, p := range paths(st) {
		pathsOf[p.id] = append(pathsOf[p.id], p.path)
	}
	var walk func(id int, p string)
	walk = func(id int, p string) {
		d := st.nodes[id]
		ino := r.inoOf[id]
		ents := map[string]cowfs.DirEntry{}
		cookie := uint64(0)
		for {
			es, eof, err := fs.ReadDir(ino, cookie, 3)
			if err != nil {
				r.fail("%s: readdir %q: %v", name, p, err)
				return
			}
			for _, e := range es {
				if _, dup := ents[e.Name]; dup {
					r.fail("%s: readdir %q lists %q twice", name, p, e.Name)
				}
				ents[e.Name] = e
				cookie = e.Cookie
			}
			if eof || len(es) == 0 {
				break
			}
		}
		if len(ents) != len(d.kids) {
			var got, want []string
			for n := range ents {
				got = append(got, n)
			}
			for n := range d.kids {
				want = append(want, n)
			}
			sort.Strings(got)
			sort.Strings(want)
			r.fail("%s: dir %q lists %v, model %v", name, p, got, want)
			return
		}
		subdirs := 0
		for n, kid := range d.kids {
			kp := path.Join(p, n)
			e, ok := ents[n]
			if !ok {
				r.fail("%s: %q missing", name, kp)
				return
			}
			kn := st.nodes[kid]
			fi, err := bf.Lstat(kp)
			if err != nil {
				r.fail("%s: lstat %q: %v", name, kp, err)
				return
			}
			a := fi.Sys().(*cowfs.Attr)
			if a.Ino != e.Ino || a.Type != e.Type {
				r.fail("%s: %q readdir says ino %d type %v, lstat ino %d type %v", name, kp, e.Ino, e.Type, a.Ino, a.Type)
			}
			if a.Type != kn.typ {
				r.fail("%s: %q is a %v, model %v", name, kp, a.Type, kn.typ)
				return
			}
			if old, ok := r.inoOf[kid]; ok && old != a.Ino {
				r.fail("%s: %q has inode %d, earlier seen as %d", name, kp, a.Ino, old)
			}
			r.inoOf[kid] = a.Ino
			if other, ok := byIno[a.Ino]; ok && other != kid {
				r.fail("%s: %q shares inode %d with a different model file", name, kp, a.Ino)
			}
			byIno[a.Ino] = kid
			if kn.typ != cowfs.TypeSymlink && a.Mode != kn.mode {
				r.fail("%s: %q mode %o, model %o", name, kp, a.Mode, kn.mode)
			}
			switch kn.typ {
			case cowfs.TypeDir:
				subdirs++
				if want := uint32(2 + countDirs(st, kn)); a.Nlink != want {
					r.fail("%s: dir %q nlink %d, want %d", name, kp, a.Nlink, want)
				}
				walk(kid, kp)
			case cowfs.TypeSymlink:
				t, err := bf.Readlink(kp)
				if err != nil || t != kn.target {
					r.fail("%s: readlink %q = %q, %v; model %q", name, kp, t, err, kn.target)
				}
			case cowfs.TypeRegular:
				if a.Nlink != uint32(nl[kid]) {
					r.fail("%s: %q nlink %d, model %d", name, kp, a.Nlink, nl[kid])
				}
				if a.Size != uint64(len(kn.data)) {
					r.fail("%s: %q size %d, model %d", name, kp, a.Size, len(kn.data))
				}
				f, err := bf.Open(kp)
				if err != nil {
					r.fail("%s: open %q: %v", name, kp, err)
					return
				}
				// One read of the whole file, one byte past its end.
				got := make([]byte, len(kn.data)+1)
				n, err := f.(io.ReaderAt).ReadAt(got, 0)
				got = got[:n]
				f.Close()
				if err != io.EOF {
					r.fail("%s: read %q: %v", name, kp, err)
				} else if !bytes.Equal(got, kn.data) {
					r.fail("%s: %q content differs from the model: %s", name, kp, firstDiff(got, kn.data))
				}
			}
			if pp, err := fs.PathOf(a.Ino); err != nil || !contains(pathsOf[kid], pp) {
				r.fail("%s: PathOf(%q) = %q, %v; model paths %v", name, kp, pp, err, pathsOf[kid])
			}
		}
		if id == modelRoot {
			fi, err := bf.Lstat("/")
			if err != nil {
				r.fail("%s: lstat /: %v", name, err)
			} else if a := fi.Sys().(*cowfs.Attr); a.Nlink != uint32(2+subdirs) || a.Mode != d.mode {
				r.fail("%s: root nlink %d mode %o, want %d %o", name, a.Nlink, a.Mode, 2+subdirs, d.mode)
			}
		}
	}
	walk(modelRoot, "")
}

func countDirs(st *mstate, d *mnode) int {
	n := 0
	for _, k := range d.kids {
		if st.nodes[k].typ == cowfs.TypeDir {
			n++
		}
	}
	return n
}

func contains(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

func firstDiff(got, want []byte) string {
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			return fmt.Sprintf("len %d vs %d, first difference at %d (%d vs %d)", len(got), len(want), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("len %d vs %d", len(got), len(want))
}

package branches_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// The crash test runs a child process (this test binary, re-executed) that
// opens a store and loops doing writes, deletes, forks, commits (fast path
// and merge) and aborts, printing "BEGIN <op>" before and "ACK <op>" after
// every operation. The parent kills it with SIGKILL at a random moment,
// reopens the store and checks that it opens, that every branch is exactly
// in its state before or after the interrupted operation (the whole store
// consistently one or the other), that every acknowledged operation is
// there, and that every live branch reads back fully; then it runs a
// reclamation pass and checks again. Repeat.
//
// To keep expected states computable, a branch writes only files named
// after itself ("<branch>-f<k>"), so merges never conflict: a commit
// applies the files the child changed since its fork over its parent.

var (
	crashRounds = flag.Int("crash.rounds", 20, "SIGKILLs in the crash test")
	crashSeed   = flag.Uint64("crash.seed", 0, "seed of the crash test (0: from the clock)")
)

const crashChildEnv = "BRANCHNFS_CRASH_CHILD"

// cbranch is one branch of the crash model.
type cbranch struct {
	Parent      string
	Invalidated bool
	Files       map[string]string // name -> sha256 of the content
	Changed     map[string]bool   // files changed since the fork
	// Checkpoints: label -> files and changed set at the checkpoint.
	Cps       map[string]map[string]string
	CpChanged map[string]map[string]bool
}

func copyFiles(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func copySet(m map[string]bool) map[string]bool {
	c := make(map[string]bool, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

type cmodel map[string]*cbranch

func (m cmodel) clone() cmodel {
	c := cmodel{}
	for n, b := range m {
		nb := *b
		nb.Files, nb.Changed = copyFiles(b.Files), copySet(b.Changed)
		nb.Cps, nb.CpChanged = map[string]map[string]string{}, map[string]map[string]bool{}
		for l, v := range b.Cps {
			nb.Cps[l] = copyFiles(v)
			nb.CpChanged[l] = copySet(b.CpChanged[l])
		}
		c[n] = &nb
	}
	return c
}

func (m cmodel) descendants(name string) []string {
	var out []string
	for n, b := range m {
		if b.Parent == name {
			out = append(out, n)
			out = append(out, m.descendants(n)...)
		}
	}
	return out
}

// apply applies one operation line ("write b f sha", "delete b f",
// "fork p c", "commit c", "abort b", "checkpoint b l", "restore b l") to
// the model. "commit c refused" (a conflict) changes nothing.
func (m cmodel) apply(op string) error {
	f := strings.Fields(op)
	if len(f) < 2 {
		return fmt.Errorf("bad op %q", op)
	}
	if f[0] == "commit" && len(f) == 3 && f[2] == "refused" {
		return nil
	}
	b := m[f[1]]
	if b == nil && f[0] != "fork" {
		return fmt.Errorf("op %q on unknown branch", op)
	}
	switch f[0] {
	case "write":
		b.Files[f[2]] = f[3]
		b.Changed[f[2]] = true
	case "delete":
		delete(b.Files, f[2])
		b.Changed[f[2]] = true
	case "fork":
		p := m[f[1]]
		if p == nil {
			return fmt.Errorf("fork of unknown %q", f[1])
		}
		m[f[2]] = &cbranch{Parent: f[1], Files: copyFiles(p.Files), Changed: map[string]bool{},
			Cps: map[string]map[string]string{}, CpChanged: map[string]map[string]bool{}}
	case "checkpoint":
		b.Cps[f[2]] = copyFiles(b.Files)
		b.CpChanged[f[2]] = copySet(b.Changed)
	case "restore":
		if b.Cps[f[2]] == nil {
			return fmt.Errorf("restore to unknown checkpoint: %q", op)
		}
		b.Files, b.Changed = copyFiles(b.Cps[f[2]]), copySet(b.CpChanged[f[2]])
	case "commit":
		p := m[b.Parent]
		for k := range b.Changed {
			if v, ok := b.Files[k]; ok {
				p.Files[k] = v
			} else {
				delete(p.Files, k)
			}
			p.Changed[k] = true
		}
		delete(m, f[1])
		for n, s := range m {
			if s.Parent == b.Parent && !s.Invalidated {
				s.Invalidated = true
				for _, d := range m.descendants(n) {
					m[d].Invalidated = true
				}
			}
		}
	case "abort":
		for _, d := range m.descendants(f[1]) {
			delete(m, d)
		}
		delete(m, f[1])
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	return nil
}

// diffModels describes how two models differ ("" when equal). Changed
// sets are not compared.
func diffModels(got, want cmodel) string {
	var out []string
	names := map[string]bool{}
	for n := range got {
		names[n] = true
	}
	for n := range want {
		names[n] = true
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		g, w := got[n], want[n]
		switch {
		case g == nil:
			out = append(out, fmt.Sprintf("branch %s missing", n))
		case w == nil:
			out = append(out, fmt.Sprintf("unexpected branch %s", n))
		case g.Parent != w.Parent || g.Invalidated != w.Invalidated:
			out = append(out, fmt.Sprintf("branch %s: parent %q invalidated %v, want %q %v", n, g.Parent, g.Invalidated, w.Parent, w.Invalidated))
		case fmt.Sprint(labels(g)) != fmt.Sprint(labels(w)):
			out = append(out, fmt.Sprintf("branch %s: checkpoints %v, want %v", n, labels(g), labels(w)))
		case !w.Invalidated:
			for k, v := range w.Files {
				if g.Files[k] != v {
					out = append(out, fmt.Sprintf("%s/%s: sha %.12s, want %.12s", n, k, g.Files[k], v))
				}
			}
			for k := range g.Files {
				if _, ok := w.Files[k]; !ok {
					out = append(out, fmt.Sprintf("%s/%s: unexpected file", n, k))
				}
			}
		}
	}
	return strings.Join(out, "; ")
}

func labels(b *cbranch) []string {
	var out []string
	for l := range b.Cps {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// readBranch returns the content of every file of a branch.
func readBranch(m *branches.Manager, name string) (map[string][]byte, error) {
	fs, _, err := m.View(name)
	if err != nil {
		return nil, err
	}
	ents, err := fs.Billy().ReadDir("/")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range ents {
		f, err := fs.Billy().Open(e.Name())
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		out[e.Name()] = data
	}
	return out, nil
}

func sha(p []byte) string { s := sha256.Sum256(p); return hex.EncodeToString(s[:]) }

// loadCrashModel reads every branch of m back: states and parents from
// List, files and their content from a full walk of each live branch, and
// changed sets from Diff. contents receives the bytes of every file.
func loadCrashModel(ctx context.Context, m *branches.Manager, contents map[string]map[string][]byte) (cmodel, error) {
	infos, err := m.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	out := cmodel{}
	for _, in := range infos {
		if in.State == branches.StateCommitted || in.State == branches.StateAborted {
			continue // history: List keeps committed and aborted branches
		}
		b := &cbranch{Parent: in.Parent, Invalidated: in.State == branches.StateInvalidated,
			Files: map[string]string{}, Changed: map[string]bool{},
			Cps: map[string]map[string]string{}, CpChanged: map[string]map[string]bool{}}
		for _, l := range in.Checkpoints {
			b.Cps[l] = nil // labels only
		}
		out[in.Name] = b
		switch in.State {
		case branches.StateInvalidated:
			if _, _, err := m.View(in.Name); !errors.Is(err, branches.ErrInvalidated) {
				return nil, fmt.Errorf("view of invalidated %s: %v", in.Name, err)
			}
			continue
		case branches.StateLive:
		default:
			return nil, fmt.Errorf("list shows %s in state %s", in.Name, in.State)
		}
		fs, _, err := m.View(in.Name)
		if err != nil {
			return nil, fmt.Errorf("view %s: %w", in.Name, err)
		}
		bf := fs.Billy()
		ents, err := bf.ReadDir("/")
		if err != nil {
			return nil, fmt.Errorf("readdir %s: %w", in.Name, err)
		}
		if contents != nil {
			contents[in.Name] = map[string][]byte{}
		}
		for _, e := range ents {
			if !e.Mode().IsRegular() {
				return nil, fmt.Errorf("%s/%s: unexpected mode %v", in.Name, e.Name(), e.Mode())
			}
			f, err := bf.Open(e.Name())
			if err != nil {
				return nil, fmt.Errorf("open %s/%s: %w", in.Name, e.Name(), err)
			}
			data, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("read %s/%s: %w", in.Name, e.Name(), err)
			}
			if int64(len(data)) != e.Size() {
				return nil, fmt.Errorf("%s/%s: read %d bytes, size %d", in.Name, e.Name(), len(data), e.Size())
			}
			b.Files[e.Name()] = sha(data)
			if contents != nil {
				contents[in.Name][e.Name()] = data
			}
		}
		d, err := m.Diff(ctx, in.Name)
		if err != nil {
			return nil, fmt.Errorf("diff %s: %w", in.Name, err)
		}
		for _, c := range d.Changes {
			b.Changed[strings.TrimPrefix(c.Path, "/")] = true
		}
	}
	return out, nil
}

func openCrashStore(ctx context.Context, dir string, reclaim time.Duration) (*branches.Manager, kv.Store, error) {
	st, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1, MemTableSize: 16 << 20})
	if err != nil {
		return nil, nil, err
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: reclaim,
		FS: cowfs.Options{BlockSize: 8192}})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return m, st, nil
}

// TestCrashChild is the child process; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashChildEnv)
	if spec == "" {
		return
	}
	var dir string
	var seed uint64
	var round int
	if _, err := fmt.Sscanf(spec, "%d %d %s", &seed, &round, &dir); err != nil {
		fmt.Println("ERR bad spec", spec)
		os.Exit(2)
	}
	if err := crashChild(dir, seed, round); err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func crashChild(dir string, seed uint64, round int) error {
	ctx := context.Background()
	// Background reclamation and folding run all the time, so kills also
	// land in them.
	m, _, err := openCrashStore(ctx, dir, time.Millisecond)
	if err != nil {
		return err
	}
	contents := map[string]map[string][]byte{}
	if _, err := loadCrashModel(ctx, m, contents); err != nil {
		return err
	}
	// The parent hands over the model it verified (with checkpoint
	// contents and changed sets, which the store does not list).
	js, err := os.ReadFile(dir + ".model")
	if err != nil {
		return err
	}
	var model cmodel
	if err := json.Unmarshal(js, &model); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	say := func(s string) { os.Stdout.Write([]byte(s + "\n")) }
	say("READY")
	nb := 0
	for i := 0; i < 5000; i++ {
		var live, all []string
		for n, b := range model {
			all = append(all, n)
			if !b.Invalidated {
				live = append(live, n)
			}
		}
		sort.Strings(live)
		sort.Strings(all)
		pick := func(v []string) string { return v[rng.IntN(len(v))] }
		var op string
		var do func() error
		// pre is an operation to run first (creating or truncating a file
		// before writing it is a store operation of its own).
		var preOp string
		var pre func() error
		refused := false
		x := rng.IntN(100)
		switch {
		case x < 50: // write: new content, or a patch at a random offset
			b := pick(live)
			name := fmt.Sprintf("%s-f%d", b, rng.IntN(4))
			old := contents[b][name]
			data := make([]byte, rng.IntN(40000)+1)
			for j := range data {
				data[j] = byte(rng.IntN(256))
			}
			var off int
			whole := old == nil || rng.IntN(3) == 0
			if !whole {
				off = rng.IntN(len(old) + 9000)
			}
			next := append([]byte(nil), old...)
			if whole {
				next = append([]byte(nil), data...)
			} else {
				if end := off + len(data); end > len(next) {
					next = append(next, make([]byte, end-len(next))...)
				}
				copy(next[off:], data)
			}
			if whole {
				preOp = fmt.Sprintf("write %s %s %s", b, name, sha(nil))
				pre = func() error {
					fs, _, err := m.View(b)
					if err != nil {
						return err
					}
					f, err := fs.Billy().OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
					if err != nil {
						return err
					}
					contents[b][name] = []byte{}
					return f.Close()
				}
			}
			op = fmt.Sprintf("write %s %s %s", b, name, sha(next))
			do = func() error {
				fs, _, err := m.View(b)
				if err != nil {
					return err
				}
				f, err := fs.Billy().OpenFile(name, os.O_RDWR, 0)
				if err != nil {
					return err
				}
				if _, err := f.(io.WriterAt).WriteAt(data, int64(off)); err != nil {
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				contents[b][name] = next
				return nil
			}
		case x < 56: // delete one of the branch's files
			b := pick(live)
			var own []string
			for n := range contents[b] {
				if strings.HasPrefix(n, b+"-") {
					own = append(own, n)
				}
			}
			if len(own) == 0 {
				continue
			}
			sort.Strings(own)
			name := pick(own)
			op = fmt.Sprintf("delete %s %s", b, name)
			do = func() error {
				fs, _, err := m.View(b)
				if err != nil {
					return err
				}
				if err := fs.Billy().Remove(name); err != nil {
					return err
				}
				delete(contents[b], name)
				return nil
			}
		case x < 72: // fork
			if len(all) >= 9 {
				continue
			}
			p := pick(live)
			nb++
			c := fmt.Sprintf("r%db%d", round, nb)
			op = fmt.Sprintf("fork %s %s", p, c)
			do = func() error {
				if _, err := m.Fork(ctx, p, c); err != nil {
					return err
				}
				contents[c] = map[string][]byte{}
				for k, v := range contents[p] {
					contents[c][k] = v
				}
				return nil
			}
		case x < 78: // checkpoint
			b := pick(live)
			nb++
			l := fmt.Sprintf("r%dc%d", round, nb)
			op = fmt.Sprintf("checkpoint %s %s", b, l)
			do = func() error {
				_, err := m.Checkpoint(ctx, b, l)
				return err
			}
		case x < 82: // restore
			b := pick(live)
			ls := labels(model[b])
			if len(ls) == 0 {
				continue
			}
			l := pick(ls)
			op = fmt.Sprintf("restore %s %s", b, l)
			do = func() error {
				if err := m.Restore(ctx, b, l); err != nil {
					return err
				}
				c, err := readBranch(m, b)
				contents[b] = c
				return err
			}
		case x < 92: // commit a live branch without live children
			var cands []string
			for _, n := range live {
				if n == branches.MainBranch || model[model[n].Parent].Invalidated {
					continue
				}
				kids := false
				for _, k := range model.descendants(n) {
					if model[k].Parent == n && !model[k].Invalidated {
						kids = true
					}
				}
				if !kids {
					cands = append(cands, n)
				}
			}
			if len(cands) == 0 {
				continue
			}
			c := pick(cands)
			op = "commit " + c
			do = func() error {
				if _, err := m.Commit(ctx, c); errors.Is(err, branches.ErrConflict) {
					// The parent was restored past the fork point.
					refused = true
					return nil
				} else if err != nil {
					return err
				}
				p := model[c].Parent
				for k := range model[c].Changed {
					if v, ok := contents[c][k]; ok {
						contents[p][k] = v
					} else {
						delete(contents[p], k)
					}
				}
				return nil
			}
		default: // abort
			var cands []string
			for _, n := range all {
				if n != branches.MainBranch {
					cands = append(cands, n)
				}
			}
			if len(cands) == 0 {
				continue
			}
			b := pick(cands)
			op = "abort " + b
			do = func() error {
				_, err := m.Abort(ctx, b)
				return err
			}
		}
		if pre != nil {
			say("BEGIN " + preOp)
			if err := pre(); err != nil {
				return fmt.Errorf("%s: %w", preOp, err)
			}
			say("ACK " + preOp)
			if err := model.apply(preOp); err != nil {
				return err
			}
		}
		say("BEGIN " + op)
		if err := do(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if refused {
			op += " refused"
		}
		say("ACK " + op)
		if err := model.apply(op); err != nil {
			return err
		}
	}
	return m.Close()
}

func TestCrash(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rounds := *crashRounds
	if testing.Short() {
		rounds = 6
	}
	t.Logf("crash test seed %d (rerun: go test ./branches -run 'TestCrash$' -crash.seed %d)", seed, seed)
	ctx := context.Background()
	dir := t.TempDir()
	m, st, err := openCrashStore(ctx, dir, -1)
	if err != nil {
		t.Fatal(err)
	}
	model, err := loadCrashModel(ctx, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	st.Close()
	saveModel := func(mod cmodel) {
		js, err := json.Marshal(mod)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+".model", js, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]int{}
	for round := 0; round < rounds; round++ {
		saveModel(model)
		cmd := exec.Command(exe, "-test.run", "^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s", crashChildEnv, seed, round, dir))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1<<16)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var got []string
		ready := false
		for l := range lines {
			got = append(got, l)
			if l == "READY" {
				ready = true
				break
			}
		}
		if !ready {
			cmd.Wait()
			t.Fatalf("round %d: child did not start: %v\n%s\n%s", round, got, stderr.String(), strings.Join(got, "\n"))
		}
		delay := time.Duration(5+rng.IntN(300)) * time.Millisecond
		timer := time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
		for l := range lines {
			got = append(got, l)
		}
		timer.Stop()
		werr := cmd.Wait()
		killed := false
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				killed = true
			}
		}
		if !killed && werr != nil {
			t.Fatalf("round %d: child failed: %v\n%s\nstderr:\n%s", round, werr, tail(got, 20), stderr.String())
		}
		// Expected states: every acknowledged op applied (before), and
		// with the interrupted op too (after).
		before := model.clone()
		pending := ""
		acks := 0
		for _, l := range got {
			switch {
			case strings.HasPrefix(l, "BEGIN "):
				pending = strings.TrimPrefix(l, "BEGIN ")
			case strings.HasPrefix(l, "ACK "):
				op := strings.TrimPrefix(l, "ACK ")
				if op != pending && op != pending+" refused" {
					t.Fatalf("round %d: ACK %q after BEGIN %q", round, op, pending)
				}
				if err := before.apply(op); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				pending = ""
				acks++
				stats[strings.Fields(op)[0]]++
			case strings.HasPrefix(l, "ERR"):
				t.Fatalf("round %d: child: %s", round, l)
			}
		}
		var after cmodel
		if pending != "" {
			after = before.clone()
			if err := after.apply(pending); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		// Reopen and compare.
		m, st, err := openCrashStore(ctx, dir, -1)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		obs, err := loadCrashModel(ctx, m, nil)
		if err != nil {
			t.Fatalf("round %d: walk after SIGKILL: %v", round, err)
		}
		dBefore := diffModels(obs, before)
		state := "before"
		model = before
		if dBefore != "" {
			model = after
			state = "after"
			if after == nil {
				t.Fatalf("round %d (%d acks, killed=%v): store differs from the acknowledged state: %s\nlast lines:\n%s",
					round, acks, killed, dBefore, tail(got, 10))
			}
			if dAfter := diffModels(obs, after); dAfter != "" {
				t.Fatalf("round %d (%d acks): store is neither before nor after %q:\nvs before: %s\nvs after: %s\nlast lines:\n%s",
					round, acks, pending, dBefore, dAfter, tail(got, 10))
			}
		}
		if pending != "" {
			stats["interrupted-"+strings.Fields(pending)[0]+"-"+state]++
		}
		// Reclamation after a crash must not change what branches show.
		if _, err := m.Reclaim(ctx); err != nil {
			t.Fatalf("round %d: reclaim after SIGKILL: %v", round, err)
		}
		obs2, err := loadCrashModel(ctx, m, nil)
		if err != nil {
			t.Fatalf("round %d: walk after reclaim: %v", round, err)
		}
		if d := diffModels(obs2, obs); d != "" {
			t.Fatalf("round %d: reclaim changed the store: %s", round, d)
		}
		m.Close()
		st.Close()
		t.Logf("round %d: killed after %v, %d acks, pending %q -> %s; %d branches", round, delay, acks, pending, state, len(obs))
	}
	t.Logf("seed %d: acknowledged ops %v", seed, stats)
}

func tail(v []string, n int) string {
	if len(v) > n {
		v = v[len(v)-n:]
	}
	return strings.Join(v, "\n")
}

package branches

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// DefaultIgnore keeps macOS metadata and NFS silly-renames out of diffs and
// merge conflicts.
var DefaultIgnore = []string{"._*", ".DS_Store", ".nfs.*"}

// MainBranch is the root branch created with a store.
const MainBranch = "main"

// Options configures a Manager. The zero value means defaults, except Store.
type Options struct {
	Store kv.Store
	// Ignore lists base-name patterns (path.Match) kept out of diffs and
	// merge conflicts. nil keeps the list stored in the store (DefaultIgnore
	// if none was ever set); non-nil, even empty, replaces it and is stored.
	Ignore []string
	// FS holds the options of branch views (block size and so on).
	FS cowfs.Options
	// ReclaimDelay is how long after an abort or commit the background
	// reclaimer runs (default 2s); negative disables it.
	ReclaimDelay time.Duration
	// NoLifecycleSync skips the fsync that makes commits, checkpoints and
	// restores durable against power loss (they still survive a crash of
	// the process). For benchmarks that separate the fsync from the rest.
	NoLifecycleSync bool
	// FoldDepth: stacks deeper than this are folded in the background
	// (default 8).
	FoldDepth int
	// GCAfterSwept: once the reclaimer's sweeps deleted this many bytes of
	// blocks, it gives their disk space back (see GC; default 256 MiB,
	// negative never).
	GCAfterSwept int64
	// GCIdle: when no commit or abort came for this long after a
	// reclaimer pass, and no client work either (NoteActivity: a READ, a
	// WRITE, a change to a name), the reclaimer prunes hidden blocks and
	// gives space back if that and the passes since the last GC freed at
	// least 4 MiB (default 10 s; negative never, and so does a negative
	// GCAfterSwept). Client work postpones it by at most gcIdleMaxWait
	// times GCIdle after the pass, so that a server busy without a pause
	// still gives space back.
	GCIdle time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// RootUID and RootGID own main's root directory when it is created.
	RootUID, RootGID uint32
	// Coord, for a store shared by several servers, tells the Manager of
	// the other servers' changes (refresh.go); nil when this Manager is
	// the store's only user.
	Coord Coord
	// Leases, for a store shared by several servers, makes each live
	// branch writable through one server at a time, its owner (owner.go);
	// nil when this Manager is the store's only user.
	Leases Leases
	// LeaseTTL is the TTL of the ownership lease (default 10s): how long
	// after this server stops its branches stay its own.
	LeaseTTL time.Duration
	// Server names this server as the owner of its branches (default
	// host name and pid). A process that opens the store with the name of
	// an earlier one, gone, takes its branches back.
	Server string
}

// EnsureDefaults fills zero fields with defaults.
func (o *Options) EnsureDefaults() {
	if o.ReclaimDelay == 0 {
		o.ReclaimDelay = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FoldDepth <= 0 {
		o.FoldDepth = 8
	}
	if o.GCAfterSwept == 0 {
		o.GCAfterSwept = 256 << 20
	}
	if o.GCIdle == 0 {
		o.GCIdle = 10 * time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.Server == "" {
		host, _ := os.Hostname()
		o.Server = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	o.FS.EnsureDefaults()
}

// Key layout of branch metadata (cowfs owns 'l', 'L', 'c' and 'M').
//
//	'B' id(8)            branch record (JSON)
//	'N' name             id(8) of the live or invalidated branch of that name
//	'K' id(8) label      checkpoint (JSON)
//	'S'                  32-byte handle secret
//	'I'                  ignore list (JSON array of patterns), once set
//	'A' id(8)            labels, score and lease of a live branch (meta.go)
func branchKey(id BranchID) []byte { return binary.BigEndian.AppendUint64([]byte{'B'}, uint64(id)) }
func nameKey(name string) []byte   { return append([]byte{'N'}, name...) }
func cpPrefix(id BranchID) []byte  { return binary.BigEndian.AppendUint64([]byte{'K'}, uint64(id)) }
func cpKey(id BranchID, label string) []byte {
	return append(cpPrefix(id), label...)
}

var secretKey = []byte{'S'}

// record is the stored form of a branch.
type record struct {
	ID            BranchID      `json:"id"`
	Name          string        `json:"name"`
	Parent        BranchID      `json:"parent,omitempty"`
	State         State         `json:"state"`
	InvalidatedBy string        `json:"invalidated_by,omitempty"`
	Top           cowfs.LayerID `json:"top"`
	Base          cowfs.LayerID `json:"base,omitempty"` // frozen layer it forked from
	// ParentTop is the parent's top layer right after the fork: if the
	// parent's top is still that layer and empty at commit time, the parent
	// did not change and the commit is a pointer swap.
	ParentTop  cowfs.LayerID `json:"parent_top,omitempty"`
	ForkTime   time.Time     `json:"fork_time"`
	ForkedFrom string        `json:"forked_from,omitempty"`
	// Owner is the server that forked the branch or last took it over
	// (several servers: owner.go); it claims the branch again when it
	// restarts.
	Owner string `json:"owner,omitempty"`
	// Gen counts the commits into this branch. A commit invalidates its
	// live siblings by raising its parent's Gen past their ForkGen (one
	// write whatever their number): a branch is invalidated when its
	// parent's Gen is greater than its ForkGen, or its parent is
	// invalidated (see stale).
	Gen uint64 `json:"gen,omitempty"`
	// ForkGen is the parent's Gen when this branch forked.
	ForkGen uint64 `json:"fork_gen,omitempty"`
	// LastCommit describes the commit that made Gen (the InvalidatedBy
	// of the children it invalidated).
	LastCommit string `json:"last_commit,omitempty"`
	// CommitGen is the parent's Gen this branch's commit made (committed
	// branches only), and CommitNote describes that commit.
	CommitGen  uint64 `json:"commit_gen,omitempty"`
	CommitNote string `json:"commit_note,omitempty"`
	// Merging is the top of the layers a commit of this branch is
	// merging into (its staging layer, over the parent's frozen stack),
	// written before the merge stores anything there. Reclamation counts
	// it live as long as the branch is, so no server's gc deletes a
	// layer a commit may still publish, however long the merge takes
	// (docs/design.md, "GC across servers"). A later commit replaces it;
	// the branch's end makes it garbage.
	Merging cowfs.LayerID `json:"merging,omitempty"`
}

// stale marks in recs (by id) every live record whose branch a commit
// invalidated without rewriting it: its parent's Gen passed its ForkGen,
// or its parent is (so) invalidated. InvalidatedBy names the commit that
// did it. Records of old stores, whose commits rewrote every sibling,
// carry no generations and stay as they are.
func stale(recs map[BranchID]*record) {
	type commit struct {
		parent BranchID
		gen    uint64
	}
	notes := map[commit]string{}
	for _, r := range recs {
		if r.State == StateCommitted && r.CommitNote != "" {
			notes[commit{r.Parent, r.CommitGen}] = r.CommitNote
		}
	}
	note := func(p *record, gen uint64) string {
		if gen == p.Gen && p.LastCommit != "" {
			return p.LastCommit
		}
		if n, ok := notes[commit{p.ID, gen}]; ok {
			return n
		}
		return fmt.Sprintf("commit %d into %s", gen, p.Name)
	}
	done := map[BranchID]bool{}
	var visit func(r *record)
	visit = func(r *record) {
		if done[r.ID] {
			return
		}
		done[r.ID] = true
		p, ok := recs[r.Parent]
		if r.State != StateLive || !ok {
			return
		}
		visit(p)
		switch {
		case p.Gen > r.ForkGen:
			r.State, r.InvalidatedBy = StateInvalidated, note(p, r.ForkGen+1)
		case p.State == StateInvalidated:
			r.State, r.InvalidatedBy = StateInvalidated, p.InvalidatedBy
		}
	}
	for _, r := range recs {
		visit(r)
	}
}

type checkpointRec struct {
	Layer cowfs.LayerID `json:"layer"`
	Time  time.Time     `json:"time"`
}

type branch struct {
	rec   record
	fs    *cowfs.View // nil once committed or aborted
	owned bool        // this server owns it (Options.Leases; m.mu)
}

// releaseLocked forgets a committed or aborted branch, whose record is
// already in the store (m.mu and opMu held): the Manager keeps live and
// invalidated branches only, so its memory does not grow with the number of
// branches ever created. The view must already be invalidated: requests
// still holding it get ESTALE, and ViewByID answers ErrStale for an id it
// does not know.
func (m *Manager) releaseLocked(b *branch) {
	if b.fs != nil {
		b.fs.Close()
		b.fs = nil
	}
	delete(m.byID, b.rec.ID)
}

// Manager owns the branches of one store. It is safe for concurrent use.
type Manager struct {
	cow     *cowfs.Store // read only; branches' own keys through cow.KV()
	opts    Options      // read only
	secret  []byte       // read only
	ignores ignoreSet    // read only: opts.Ignore compiled

	// Lock order: foldMu, opMu, views' locks (child before parent), mu
	// (docs/design.md, "Lock order").

	// opMu serialises lifecycle operations (fork, commit, ...).
	opMu sync.Mutex
	// foldMu serialises folds (see Fold); taken before opMu.
	foldMu sync.Mutex
	// gc serialises GC with the reclaimer's passes. Lock order: gc.mu,
	// foldMu, opMu.
	gc gcState

	// cps indexes the checkpoint records by layer (its own leaf lock).
	cps cpIndex

	mu     sync.RWMutex // protects the following; taken last
	byID   map[BranchID]*branch
	byName map[string]*branch // live and invalidated branches

	// mergeHook, when set (tests), runs while a commit merges with the
	// parent's view unlocked.
	mergeHook func()

	metrics struct {
		passes, layers, blocks, folded atomic.Int64
	}

	refreshed atomic.Int64 // watch events applied (refresh.go)
	unsettled atomic.Bool  // an unknown outcome's records are not read again yet (lifecycle.go: settle)
	lease     Lease        // ownership (owner.go); protected by mu

	reclaim chan struct{}
	// activity counts NoteActivity calls: the idle GC waits for a pause
	// in them too.
	activity atomic.Uint64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// CheckName validates a branch or checkpoint name.
func CheckName(name string) error {
	if !nameRE.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: %q (want 1-64 of A-Z a-z 0-9 . _ -, not . or ..)", ErrInvalidName, name)
	}
	return nil
}

// Open opens the branches of a store, creating branch main on first use.
func Open(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Store == nil {
		return nil, errors.New("branches: Options.Store is nil")
	}
	opts.EnsureDefaults()
	// Other servers may write the store: a view trusts what its Store
	// cached of its top layer only while this server owns the branch.
	opts.FS.Shared = opts.FS.Shared || opts.Leases != nil
	cow, err := cowfs.Open(ctx, opts.Store, opts.FS)
	if err != nil {
		return nil, fmt.Errorf("branches: open: %w", mapErr(err))
	}
	opts.FS = cow.Options()
	if opts.Ignore, err = loadIgnore(ctx, opts.Store, opts.Ignore); err != nil {
		return nil, err
	}
	ignores, err := compileIgnoreSet(opts.Ignore)
	if err != nil {
		return nil, err
	}
	m := &Manager{cow: cow, opts: opts, ignores: ignores, byID: map[BranchID]*branch{}, byName: map[string]*branch{},
		reclaim: make(chan struct{}, 1)}
	var rev int64
	if opts.Coord != nil {
		// Before the load: a watch from rev+1 misses nothing after it.
		if rev, err = opts.Coord.Revision(ctx); err != nil {
			return nil, fmt.Errorf("branches: open: %w", err)
		}
	}
	if err := m.load(ctx); err != nil {
		return nil, err
	}
	m.cps.mu.Lock()
	err = m.cps.load(ctx, opts.Store)
	m.cps.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("branches: open: %w", mapErr(err))
	}
	rctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	if opts.ReclaimDelay > 0 {
		m.wg.Add(1)
		go m.reclaimLoop(rctx)
		m.kickReclaim()
	}
	if opts.Leases != nil {
		if err := m.startOwnership(ctx); err != nil {
			cancel()
			m.wg.Wait()
			return nil, err
		}
		m.wg.Add(1)
		go m.leaseLoop(rctx)
	}
	if opts.Coord != nil {
		m.wg.Add(1)
		go m.watchLoop(rctx, rev+1)
	}
	return m, nil
}

func (m *Manager) load(ctx context.Context) error {
	var recs []record
	err := m.cow.KV().Update(ctx, func(tx kv.Txn) error {
		recs = recs[:0]
		v, err := tx.Get(secretKey)
		switch {
		case errors.Is(err, kv.ErrNotFound):
			v = make([]byte, 32)
			if _, err := rand.Read(v); err != nil {
				return err
			}
			if err := tx.Set(secretKey, v); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		m.secret = v
		return tx.Iterate([]byte{'B'}, nil, false, func(k, v []byte) (bool, error) {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return false, fmt.Errorf("branches: corrupt record %x: %w", k, err)
			}
			recs = append(recs, r)
			return true, nil
		})
	})
	if err != nil {
		return fmt.Errorf("branches: open: %w", mapErr(err))
	}
	if len(recs) == 0 {
		return m.createMain(ctx)
	}
	byID := make(map[BranchID]*record, len(recs))
	for i := range recs {
		byID[recs[i].ID] = &recs[i]
	}
	stale(byID)
	for _, r := range recs {
		if r.State != StateLive && r.State != StateInvalidated {
			continue // committed and aborted branches stay in the store only
		}
		b := &branch{rec: r}
		fs, err := m.cow.OpenView(ctx, r.Top)
		if err != nil {
			return fmt.Errorf("branches: open %s: %w", r.Name, err)
		}
		if r.State == StateInvalidated {
			fs.Invalidate(&InvalidatedError{Branch: r.Name, By: r.InvalidatedBy})
		}
		b.fs = fs
		m.byName[r.Name] = b
		m.byID[r.ID] = b
	}
	if _, ok := m.byName[MainBranch]; !ok {
		return errors.New("branches: store has no branch main")
	}
	return nil
}

func (m *Manager) createMain(ctx context.Context) error {
	id, err := m.cow.Next(ctx, "branch")
	if err != nil {
		return err
	}
	r := record{ID: BranchID(id), Name: MainBranch, State: StateLive, ForkTime: time.Now().UTC()}
	_, err = m.cow.NewTree(ctx, 0o755, m.opts.RootUID, m.opts.RootGID, func(tx *cowfs.Txn, l cowfs.LayerID) error {
		r.Top = l
		return putRecord(tx.KV(), r)
	})
	if err != nil {
		return mapErr(err)
	}
	fs := m.cow.View([]cowfs.LayerID{r.Top})
	b := &branch{rec: r, fs: fs}
	m.byID[r.ID], m.byName[r.Name] = b, b
	return nil
}

func putRecord(tx kv.Txn, r record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := tx.Set(branchKey(r.ID), v); err != nil {
		return err
	}
	switch r.State {
	case StateLive, StateInvalidated:
		return tx.Set(nameKey(r.Name), binary.BigEndian.AppendUint64(nil, uint64(r.ID)))
	}
	err = tx.Delete(nameKey(r.Name))
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	return err
}

// mapErr turns store errors into branches errors.
func mapErr(err error) error {
	if errors.Is(err, kv.ErrNoSpace) {
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	if errors.Is(err, kv.ErrFenced) && !errors.Is(err, ErrNotOwner) {
		// A commit fenced by a branch's owner key: another server took
		// it over (kv.Fence).
		return fmt.Errorf("%w: %w", ErrNotOwner, err)
	}
	return err
}

// lookupLocked returns the live branch name (m.mu held).
func (m *Manager) lookupLocked(name string) (*branch, error) {
	b, ok := m.byName[name]
	if !ok {
		if err := CheckName(name); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: branch %q", ErrNotFound, name)
	}
	if b.rec.State == StateInvalidated {
		return nil, &InvalidatedError{Branch: name, By: b.rec.InvalidatedBy}
	}
	return b, nil
}

func (m *Manager) live(name string) (*branch, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.lookupLocked(name)
}

// View returns the live view of a branch by name. Errors: ErrNotFound,
// ErrInvalidated (an *InvalidatedError, also ErrStale), ErrInvalidName.
func (m *Manager) View(name string) (*cowfs.View, Info, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, err := m.lookupLocked(name)
	if err != nil {
		return nil, Info{}, err
	}
	return b.fs, m.infoLocked(b), nil
}

// ViewByID is View by branch id (for NFS handles). A committed or aborted
// branch gives ErrStale: ids are never reused, so an id the Manager does not
// hold is one of those.
func (m *Manager) ViewByID(id BranchID) (*cowfs.View, Info, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, ok := m.byID[id]
	if !ok {
		return nil, Info{}, fmt.Errorf("%w: branch id %d was committed or aborted", ErrStale, id)
	}
	switch b.rec.State {
	case StateInvalidated:
		return nil, Info{}, &InvalidatedError{Branch: b.rec.Name, By: b.rec.InvalidatedBy}
	case StateCommitted, StateAborted:
		return nil, Info{}, fmt.Errorf("%w: branch %q was %s", ErrStale, b.rec.Name, b.rec.State)
	}
	return b.fs, m.infoLocked(b), nil
}

// Metrics is a snapshot of the Manager's background work.
type Metrics struct {
	// BackgroundPasses counts the passes of the background reclaimer
	// (reclaim, fold, reclaim again if it folded) that ended.
	BackgroundPasses int64 `json:"background_passes"`
	ReclaimedLayers  int64 `json:"reclaimed_layers"`
	ReclaimedBlocks  int64 `json:"reclaimed_blocks"`
	FoldedLayers     int64 `json:"folded_layers"`
}

// Metrics returns a snapshot of the Manager's background work.
func (m *Manager) Metrics() Metrics {
	return Metrics{BackgroundPasses: m.metrics.passes.Load(), ReclaimedLayers: m.metrics.layers.Load(),
		ReclaimedBlocks: m.metrics.blocks.Load(), FoldedLayers: m.metrics.folded.Load()}
}

// Secret returns the store's random 32-byte key for MACs on file handles.
func (m *Manager) Secret() []byte { return append([]byte(nil), m.secret...) }

// Sync makes everything acknowledged so far durable against power loss.
func (m *Manager) Sync(ctx context.Context) error { return m.cow.Sync(ctx) }

// Close stops background work and syncs. It does not close the store.
func (m *Manager) Close() error {
	m.cancel()
	m.wg.Wait()
	return m.cow.Sync(context.Background())
}

// Ignore returns the store's ignore list.
func (m *Manager) Ignore() []string { return append([]string{}, m.opts.Ignore...) }

// ignore reports whether path p ('/'-separated, from the branch's root)
// is on the ignore list or InternalIgnore (ignore.go).
func (m *Manager) ignore(p string) bool { return m.ignores.match(p) || internalIgnores.match(p) }

func (m *Manager) infoLocked(b *branch) Info {
	r := b.rec
	in := Info{ID: r.ID, Name: r.Name, ParentID: r.Parent, State: r.State, InvalidatedBy: r.InvalidatedBy,
		ForkTime: r.ForkTime, ForkedFrom: r.ForkedFrom, Owner: r.Owner}
	depth := 0
	for p := r.Parent; p != 0; depth++ {
		pb, ok := m.byID[p]
		if !ok || depth > 1<<16 {
			break
		}
		if p == r.Parent {
			in.Parent = pb.rec.Name
		}
		p = pb.rec.Parent
	}
	in.Depth = depth
	return in
}

// Live lists the live branches from memory, without touching the store:
// cheap enough for every NFS request on the root export. Only the fields
// infoLocked fills are set (no sizes, checkpoints or children).
func (m *Manager) Live() []Info {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Info, 0, len(m.byName))
	for _, b := range m.byName {
		if b.rec.State == StateLive {
			out = append(out, m.infoLocked(b))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Get describes one live or invalidated branch.
func (m *Manager) Get(ctx context.Context, name string) (Info, error) {
	m.mu.RLock()
	b, ok := m.byName[name]
	m.mu.RUnlock()
	if !ok {
		if err := CheckName(name); err != nil {
			return Info{}, err
		}
		return Info{}, fmt.Errorf("%w: branch %q", ErrNotFound, name)
	}
	return m.fullInfo(ctx, b)
}

func (m *Manager) fullInfo(ctx context.Context, b *branch) (Info, error) {
	m.mu.RLock()
	in := m.infoLocked(b)
	for _, c := range m.byName {
		if c.rec.Parent == b.rec.ID && c.rec.State == StateLive {
			in.Children = append(in.Children, c.rec.Name)
		}
	}
	fs := b.fs
	rec := b.rec
	m.mu.RUnlock()
	sort.Strings(in.Children)
	if rec.State != StateLive && rec.State != StateInvalidated {
		return in, nil // its layers now belong to its parent, or to nobody
	}
	if fs != nil && rec.Base != 0 {
		// The view's stack, not the stored one: an abort and the reclaimer
		// may delete layers meanwhile, which only makes the count smaller.
		var err error
		if in.BytesChanged, err = m.cow.DeltaBytes(ctx, fs.Stack(), rec.Base); err != nil {
			return in, err
		}
	}
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		in.Checkpoints = in.Checkpoints[:0]
		pfx := cpPrefix(rec.ID)
		return tx.Iterate(pfx, nil, true, func(k, _ []byte) (bool, error) {
			in.Checkpoints = append(in.Checkpoints, string(k[len(pfx):]))
			return true, nil
		})
	})
	return in, err
}

// List describes every branch the store knows, committed and aborted ones
// included (check State), parents before children, siblings by name.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	m.mu.RLock()
	var bs []*branch
	for _, b := range m.byID {
		bs = append(bs, b)
	}
	m.mu.RUnlock()
	// Committed and aborted branches are in the store only.
	recs := map[BranchID]record{}
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		clear(recs)
		return tx.Iterate([]byte{'B'}, nil, false, func(k, v []byte) (bool, error) {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return false, fmt.Errorf("branches: corrupt record %x: %w", k, err)
			}
			recs[r.ID] = r
			return true, nil
		})
	})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]Info, 0, len(recs))
	held := map[BranchID]bool{}
	for _, b := range bs {
		in, err := m.fullInfo(ctx, b)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
		held[in.ID] = true
	}
	for id, r := range recs {
		if !held[id] {
			out = append(out, storedInfo(r, recs))
		}
	}
	for i, in := range out {
		if r, ok := recs[in.ID]; ok && in.ParentID != 0 && !held[in.ParentID] {
			// An invalidated branch whose parent was committed since.
			si := storedInfo(r, recs)
			out[i].Parent, out[i].Depth = si.Parent, si.Depth
		}
	}
	// Order as a tree walk.
	kids := map[BranchID][]Info{}
	for _, in := range out {
		kids[in.ParentID] = append(kids[in.ParentID], in)
	}
	for _, v := range kids {
		sort.Slice(v, func(i, j int) bool { return v[i].Name < v[j].Name })
	}
	var walk func(id BranchID)
	res := make([]Info, 0, len(out))
	seen := map[BranchID]bool{}
	walk = func(id BranchID) {
		for _, in := range kids[id] {
			if seen[in.ID] {
				continue
			}
			seen[in.ID] = true
			res = append(res, in)
			walk(in.ID)
		}
	}
	walk(0)
	for _, in := range out { // orphans of invalidated or missing parents
		if !seen[in.ID] {
			res = append(res, in)
		}
	}
	return res, nil
}

// storedInfo describes a branch the Manager does not hold (committed or
// aborted) from its record and the other records of the store.
func storedInfo(r record, recs map[BranchID]record) Info {
	in := Info{ID: r.ID, Name: r.Name, ParentID: r.Parent, State: r.State, InvalidatedBy: r.InvalidatedBy,
		ForkTime: r.ForkTime, ForkedFrom: r.ForkedFrom, Parent: recs[r.Parent].Name}
	for p := r.Parent; p != 0 && in.Depth <= 1<<16; in.Depth++ {
		pr, ok := recs[p]
		if !ok {
			break
		}
		p = pr.Parent
	}
	return in
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

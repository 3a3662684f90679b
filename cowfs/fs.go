package cowfs

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
)

// DefaultMaxFileSize is the default Options.MaxFileSize: 1 TiB.
const DefaultMaxFileSize = 1 << 40

// Options configures a Store and every view of it. The zero value means
// defaults.
type Options struct {
	// BlockSize is the size of data blocks (default 32 KiB). It must stay
	// the same for the life of a store.
	BlockSize int
	// InlineMax: blocks of at most this many bytes are stored inside their
	// reference instead of in the content store (default 512).
	InlineMax int
	// MaxFileSize bounds file sizes (default DefaultMaxFileSize); larger
	// sizes get EFBIG.
	MaxFileSize uint64
	// ReadOnly views refuse writes with EROFS (checkpoints).
	ReadOnly bool
	// Shared: other servers may write the store (branches.Options.Leases).
	// A view then counts its top layer as written by this Store alone only
	// while SetReadOnly(false) says this server owns its branch; without
	// it, every view's top is (topcache.go).
	Shared bool
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
	// StatDir is a directory on the store's disk, for StatFS.
	StatDir string
	// LegacyNameSlots: the store predates form-insensitive names (Open
	// sets it for such a store, see openFormat), so a name that misses is also looked for where such a
	// store put it.
	LegacyNameSlots bool
	// InodeCacheSize bounds the view's cache of the frozen layers' inode
	// records (which frozen layers hold one, and the topmost of them
	// decoded) to this many inodes (default 65,536); when full it starts
	// over. Negative disables the cache.
	InodeCacheSize int
	// InodeCacheBytes bounds the same cache by the estimated memory of its
	// entries (default DefaultInodeCacheBytes, 8 MiB, per view); when an
	// entry would take it past the bound it starts over.
	InodeCacheBytes int
	// BlockCacheBytes bounds the Store's cache of the frozen layers' block
	// references (readcache.go), which all its views share, by the
	// estimated memory of its entries (default DefaultBlockCacheBytes,
	// 8 MiB per Store: about 80,000 blocks, 2.5 GiB of file data at 32 KiB
	// blocks); when an entry would take it past the bound it starts over.
	// Negative disables the cache.
	BlockCacheBytes int
	// Blobs, when set, holds block and chunk content instead of the kv
	// store's 'c' keys (docs/design.md, "Blocks in object storage"): writes
	// upload to it before the transaction referencing the content commits,
	// reads and the block sweep use it. A store keeps its content in one
	// place for its whole life. The caller closes it after the Store's
	// last use.
	Blobs blobs.Store
	// Leases, when several servers share the store, orders their block
	// writers and block sweeps (docs/design.md, "Deleting blocks with
	// several servers"): writers take intents bound to the server's lease
	// before they rely on content, and a sweep deletes content only after
	// a transaction shows no intent and no reference since its mark. Nil
	// (one server) costs nothing: the Store's sweep tracker suffices.
	Leases kv.Leased
}

// DefaultInodeCacheSize is the default Options.InodeCacheSize.
const DefaultInodeCacheSize = 1 << 16

// DefaultInodeCacheBytes is the default Options.InodeCacheBytes: 8 MiB, room
// for about 30,000 inodes of one name each.
const DefaultInodeCacheBytes = 8 << 20

// DefaultBlockCacheBytes is the default Options.BlockCacheBytes: 8 MiB.
const DefaultBlockCacheBytes = 8 << 20

// EnsureDefaults fills zero fields with defaults.
func (o *Options) EnsureDefaults() {
	if o.BlockSize <= 0 {
		o.BlockSize = 32 << 10
	}
	if o.InlineMax <= 0 {
		o.InlineMax = 512
	}
	if o.MaxFileSize == 0 {
		o.MaxFileSize = DefaultMaxFileSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.InodeCacheSize == 0 {
		o.InodeCacheSize = DefaultInodeCacheSize
	}
	if o.InodeCacheBytes <= 0 {
		o.InodeCacheBytes = DefaultInodeCacheBytes
	}
	if o.BlockCacheBytes == 0 {
		o.BlockCacheBytes = DefaultBlockCacheBytes
	}
}

// View is a copy-on-write view of one layer stack: the tree of one branch or
// checkpoint. Writes go to the top layer; reads resolve top-down through the
// stack. It is safe for concurrent use.
type View struct {
	s     *Store     // the store it is a view of
	store kv.Store   // s.kv, read only
	alloc *Allocator // s.alloc, read only
	opts  Options    // s.opts, read only
	bs    uint64     // block size, read only
	ctx   context.Context
	stop  context.CancelFunc

	// Lock order: nsMu or one dataMu stripe, then mu, then cacheMu; a
	// writer takes its Store's sweepTracker lock inside mu, and the
	// Store's frozen-reference cache lock (frozenCache.mu) is a leaf
	// (docs/design.md, "Lock order").

	// nsMu serialises namespace changes (create, link, unlink, rename, ...),
	// so they never conflict with each other.
	nsMu sync.Mutex
	// dataMu stripes serialise writes to the same inode.
	dataMu [64]sync.Mutex

	// dirty is false only while the top layer is known to be empty: it was
	// installed fresh by SetFreshStackLocked and nothing wrote since.
	dirty atomic.Bool
	// ro refuses writes with EROFS while set (SetReadOnly), or EAGAIN
	// while fence is suspended.
	ro atomic.Bool
	// fence is the fencing token of the view's writes: every transaction
	// run under ctx carries it (kv.WithFence), so on a shared store a
	// write commits only while this server's lease owns the branch, in
	// the commit itself. Unarmed (no check) unless the owner arms it.
	fence *kv.Fence
	// owned, on a shared store (Options.Shared), is set while this server
	// owns the view's branch (SetReadOnly(false)); ownedAt is the Store's
	// reference-change sequence number when it last became so: cached
	// entries of the top layer filled before it are void (topcache.go).
	owned   atomic.Bool
	ownedAt atomic.Uint64
	// staleTop is the top layer whose interrupted truncates the view
	// purged (finishStale); 0 before the first data write.
	staleTop atomic.Uint64

	mu    sync.RWMutex // protects the following
	stack []LayerID    // top first
	err   error        // set once the view is unusable

	cacheMu sync.Mutex // protects the following
	// cache maps an inode to what the frozen layers (below the top) hold
	// of it: which layers have a record, and the topmost record decoded.
	//
	// Invariant: an entry stays true while the stack it was read under is
	// the view's stack, and every stack change drops the cache
	// (setStackLocked, under mu's write lock, which waits for every call
	// reading under the old stack). Frozen layers are written only by:
	//   - fold (FoldDown of x into y): y is referenced by x alone, so every
	//     stack holding y holds x right above it; x's records stay while
	//     x is in a stack, so the topmost frozen record of every inode is
	//     the same before, during and after the copy, and entries resolved
	//     through [x] find the same slots in x. Dropping x from the stack
	//     (SetStackLocked) drops the cache, before the reclaimer deletes x.
	//   - prune and rechunk: data keys only, no inode record.
	// Commits, checkpoints, restores and forks change a view's layers only
	// through SetStackLocked or SetFreshStackLocked (a checkpoint freezes
	// the top, whose records were never cached, and the old cache would
	// miss them), so they drop it too.
	cache map[InodeID]*frozenInode
	// cacheBytes is the estimated memory of cache's entries.
	cacheBytes int
}

// frozenInode is what the frozen layers of a stack hold of one inode.
// Shared between calls: read only.
type frozenInode struct {
	layers []LayerID // layers holding a record, top first
	rec    *inode    // the record in layers[0]; nil if layers is empty
}

// size estimates the memory an entry takes in the cache: the map slot,
// the entry, the layer list and the decoded record with its names.
func (e *frozenInode) size() int {
	n := 96 + 8*cap(e.layers)
	if e.rec != nil {
		n += e.rec.size()
	}
	return n
}

// Lock blocks every call on the view until Unlock; branches uses it to
// change stacks atomically with respect to readers and writers.
func (f *View) Lock() { f.nsMu.Lock(); f.mu.Lock() }

// Unlock undoes Lock.
func (f *View) Unlock() { f.mu.Unlock(); f.nsMu.Unlock() }

func (f *View) setStackLocked(stack []LayerID) {
	f.dirty.Store(true)
	f.stack = stack
	f.dropCache()
}

// dropCache empties the inode cache, releasing its memory.
func (f *View) dropCache() {
	f.cacheMu.Lock()
	f.cache = map[InodeID]*frozenInode{}
	f.cacheBytes = 0
	f.cacheMu.Unlock()
}

// MaxFileSize returns the largest file size the view accepts.
func (f *View) MaxFileSize() uint64 { return f.opts.MaxFileSize }

// Stack returns the layer stack, top first.
func (f *View) Stack() []LayerID {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]LayerID(nil), f.stack...)
}

// SetFreshStackLocked is SetStackLocked for a stack whose top layer was
// just created empty; TopDirty reports false until something writes.
func (f *View) SetFreshStackLocked(stack []LayerID) {
	f.setStackLocked(append([]LayerID(nil), stack...))
	f.dirty.Store(false)
}

// SetReadOnly makes later writes fail with EROFS while ro is set (a
// branch another server writes), and allows them again once it is not.
// On a shared store (Options.Shared) it also tells the view whether this
// server owns the branch: only then may a READ use what the Store cached
// of the top layer, which no other server writes meanwhile (topcache.go).
func (f *View) SetReadOnly(ro bool) {
	if ro {
		f.owned.Store(false) // before writes stop: no READ trusts the cache from here on
		f.ro.Store(true)
		return
	}
	if f.opts.Shared && !f.owned.Load() {
		// Another server may have written the top while this one did
		// not own it: what was cached of it before now is void.
		f.ownedAt.Store(f.s.frozen.bump())
		f.owned.Store(true)
	}
	f.ro.Store(false)
}

// Fence returns the fencing token of the view's writes (see kv.Fence):
// the owner of its branch arms it with its owner key and lease, every
// transaction of a write to the view compares it in its commit, and a
// commit it refuses fails with EROFS (kv.ErrFenced), or EAGAIN while it
// is suspended. It is unarmed until then.
func (f *View) Fence() *kv.Fence { return f.fence }

// TopDirty reports whether the top layer may hold writes. False means it
// is certainly empty; true means it may be (check with LayerEmpty).
func (f *View) TopDirty() bool { return f.dirty.Load() }

// StackLocked is Stack for a caller holding Lock.
func (f *View) StackLocked() []LayerID { return append([]LayerID(nil), f.stack...) }

// Invalidate makes every later call fail with ESTALE; Err returns cause.
// It drops the inode cache, which no later call can use.
func (f *View) Invalidate(cause error) {
	f.mu.Lock()
	f.err = cause
	f.mu.Unlock()
	f.dropCache()
}

// InvalidateIfLive is Invalidate unless the view is no longer usable
// already (it then keeps its cause); it reports whether it invalidated.
func (f *View) InvalidateIfLive(cause error) bool {
	f.mu.Lock()
	live := f.err == nil
	if live {
		f.err = cause
	}
	f.mu.Unlock()
	if live {
		f.dropCache()
	}
	return live
}

// InvalidateLocked is Invalidate for a caller holding Lock.
func (f *View) InvalidateLocked(cause error) {
	f.err = cause
	f.dropCache()
}

// Err reports why the view is no longer usable (nil while it is).
func (f *View) Err() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.err
}

// Close releases the view.
func (f *View) Close() error {
	f.stop()
	return nil
}

// state is a consistent copy of what a call needs from the view.
type state struct {
	stack []LayerID
}

// begin checks the view is usable and snapshots its stack. The caller
// holds f.mu.RLock until the call ends, so stack changes wait for it.
func (f *View) begin(write bool) (state, error) {
	if f.err != nil {
		return state{}, syscall.ESTALE
	}
	if write && (f.opts.ReadOnly || f.ro.Load()) {
		if !f.opts.ReadOnly && f.fence.Suspended() {
			// This server is getting its lease back, and may own the
			// branch again shortly: the client retries (JUKEBOX).
			return state{}, syscall.EAGAIN
		}
		return state{}, syscall.EROFS
	}
	return state{stack: f.stack}, nil
}

// layersOf returns the layers of the stack that hold a record of ino, top
// first. The top layer is always probed directly because it changes; the
// frozen rest is cached.
func (f *View) layersOf(tx kv.Txn, st state, ino InodeID) ([]LayerID, error) {
	out := make([]LayerID, 0, 4)
	if ok, err := tx.Has(inodeKey(st.stack[0], ino)); err != nil {
		return nil, err
	} else if ok {
		out = append(out, st.stack[0])
	}
	fr, err := f.frozenOf(tx, st, ino)
	if err != nil {
		return nil, err
	}
	return append(out, fr.layers...), nil
}

// frozenOf returns what the frozen layers hold of ino, from the cache when
// it knows. The result is shared: read only.
func (f *View) frozenOf(tx kv.Txn, st state, ino InodeID) (*frozenInode, error) {
	limit := f.opts.InodeCacheSize
	if limit > 0 {
		f.cacheMu.Lock()
		fr, hit := f.cache[ino]
		f.cacheMu.Unlock()
		if hit {
			return fr, nil
		}
	}
	fr := &frozenInode{}
	for _, l := range st.stack[1:] {
		if fr.rec != nil {
			ok, err := tx.Has(inodeKey(l, ino))
			if err != nil {
				return nil, err
			}
			if ok {
				fr.layers = append(fr.layers, l)
			}
			continue
		}
		n, err := layerInode(tx, l, ino)
		if err != nil {
			return nil, err
		}
		if n != nil {
			fr.layers = append(fr.layers, l)
			fr.rec = n
		}
	}
	if limit > 0 {
		size := fr.size()
		f.cacheMu.Lock()
		if len(f.cache) >= limit || f.cacheBytes+size > f.opts.InodeCacheBytes {
			// Start over rather than keep a big map: clear would
			// keep its buckets.
			f.cache = make(map[InodeID]*frozenInode, 64)
			f.cacheBytes = 0
		}
		if old, ok := f.cache[ino]; ok { // a racing call filled it
			f.cacheBytes -= old.size()
		}
		f.cache[ino] = fr
		f.cacheBytes += size
		f.cacheMu.Unlock()
	}
	return fr, nil
}

// getInode resolves ino top-down. It returns ENOENT for a missing or deleted
// inode, plus the layer holding the visible record. The top layer is read
// with one Get (not found: it holds no record); a record in a frozen layer
// comes from the cache, so a cached inode costs one point lookup. The
// caller owns the returned record.
func (f *View) getInode(tx kv.Txn, st state, ino InodeID) (*inode, LayerID, error) {
	n, l, _, err := f.getInodeLayers(tx, st, ino, false)
	return n, l, err
}

// getInodeLayers is getInode that also returns, when withLayers is set,
// the layers holding a record of ino (as layersOf).
func (f *View) getInodeLayers(tx kv.Txn, st state, ino InodeID, withLayers bool) (*inode, LayerID, []LayerID, error) {
	top, err := layerInode(tx, st.stack[0], ino)
	if err != nil {
		return nil, 0, nil, err
	}
	return f.inodeOver(tx, st, ino, top, withLayers)
}

// inodeOver is getInodeLayers given the top layer's record of ino (top,
// nil if it holds none).
func (f *View) inodeOver(tx kv.Txn, st state, ino InodeID, top *inode, withLayers bool) (*inode, LayerID, []LayerID, error) {
	var fr *frozenInode
	var err error
	if top == nil || withLayers {
		if fr, err = f.frozenOf(tx, st, ino); err != nil {
			return nil, 0, nil, err
		}
	}
	var layers []LayerID
	if withLayers {
		layers = make([]LayerID, 0, 1+len(fr.layers))
		if top != nil {
			layers = append(layers, st.stack[0])
		}
		layers = append(layers, fr.layers...)
	}
	switch {
	case top != nil:
		if top.Deleted {
			return nil, 0, nil, syscall.ENOENT
		}
		return top, st.stack[0], layers, nil
	case fr.rec == nil || fr.rec.Deleted:
		return nil, 0, nil, syscall.ENOENT
	}
	return fr.rec.clone(), fr.layers[0], layers, nil
}

// layerInode returns layer l's record of ino, nil if it holds none.
func layerInode(tx kv.Txn, l LayerID, ino InodeID) (*inode, error) {
	v, err := tx.Get(inodeKey(l, ino))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeInode(ino, v)
}

// Allocator hands out inode numbers and layer ids from store-wide counters,
// reserving ranges so most allocations need no transaction of their own.
type Allocator struct {
	store kv.Store
	mu    sync.Mutex // protects the following
	next  map[string]uint64
	limit map[string]uint64
}

// newAllocator returns the allocator of a store. Use one per store.
func newAllocator(store kv.Store) *Allocator {
	return &Allocator{store: store, next: map[string]uint64{}, limit: map[string]uint64{}}
}

const allocBatch = 1024

// Next returns a new value of the named counter. Values are never reused,
// even across crashes: a range is reserved durably before it is handed out.
func (a *Allocator) Next(ctx context.Context, counter string) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next[counter] >= a.limit[counter] {
		var lo, hi uint64
		err := a.store.Update(ctx, func(tx kv.Txn) error {
			v, err := tx.Get(metaKey("ctr/" + counter))
			switch {
			case errors.Is(err, kv.ErrNotFound):
				lo = 1000 // low numbers are reserved (RootIno, ...)
			case err != nil:
				return err
			default:
				lo = binary.BigEndian.Uint64(v)
			}
			hi = lo + allocBatch
			return tx.Set(metaKey("ctr/"+counter), u64(nil, hi))
		})
		if err != nil {
			return 0, err
		}
		a.next[counter], a.limit[counter] = lo, hi
	}
	v := a.next[counter]
	a.next[counter]++
	return v, nil
}

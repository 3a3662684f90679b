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
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
	// StatDir is a directory on the store's disk, for StatFS.
	StatDir string
	// LegacyNameSlots: the store predates form-insensitive names (Open
	// sets it for such a store, see openFormat), so a name that misses is also looked for where such a
	// store put it.
	LegacyNameSlots bool
	// InodeCacheSize bounds the view's cache of which frozen layers hold a
	// record of an inode (default 65,536 entries, a few MiB); when full it
	// starts over. Negative disables the cache.
	InodeCacheSize int
	// Blobs, when set, holds block and chunk content instead of the kv
	// store's 'c' keys (docs/design.md, "Blocks in object storage"): writes
	// upload to it before the transaction referencing the content commits,
	// reads and the block sweep use it. A store keeps its content in one
	// place for its whole life. The caller closes it after the Store's
	// last use.
	Blobs blobs.Store
}

// DefaultInodeCacheSize is the default Options.InodeCacheSize.
const DefaultInodeCacheSize = 1 << 16

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
	// writer takes its Store's sweepTracker lock inside mu (docs/design.md,
	// "Lock order").

	// nsMu serialises namespace changes (create, link, unlink, rename, ...),
	// so they never conflict with each other.
	nsMu sync.Mutex
	// dataMu stripes serialise writes to the same inode.
	dataMu [64]sync.Mutex

	// dirty is false only while the top layer is known to be empty: it was
	// installed fresh by SetFreshStackLocked and nothing wrote since.
	dirty atomic.Bool

	mu    sync.RWMutex // protects the following
	stack []LayerID    // top first
	err   error        // set once the view is unusable

	cacheMu sync.Mutex // protects the following
	// cache maps an inode to the frozen layers (below the top) holding a
	// record of it, top first. Frozen layers never change while they are
	// in the stack, so entries stay true until the stack changes.
	cache map[InodeID][]LayerID
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
	f.cache = map[InodeID][]LayerID{}
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
	if write && f.opts.ReadOnly {
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
	frozen, err := f.frozenLayersOf(tx, st, ino)
	if err != nil {
		return nil, err
	}
	return append(out, frozen...), nil
}

// frozenLayersOf returns the frozen layers (below the top) that hold a
// record of ino, top first, from the cache when it knows them.
func (f *View) frozenLayersOf(tx kv.Txn, st state, ino InodeID) ([]LayerID, error) {
	limit := f.opts.InodeCacheSize
	var frozen []LayerID
	hit := false
	if limit > 0 {
		f.cacheMu.Lock()
		frozen, hit = f.cache[ino]
		f.cacheMu.Unlock()
	}
	if !hit {
		frozen = []LayerID{}
		for _, l := range st.stack[1:] {
			ok, err := tx.Has(inodeKey(l, ino))
			if err != nil {
				return nil, err
			}
			if ok {
				frozen = append(frozen, l)
			}
		}
		if limit > 0 {
			f.cacheMu.Lock()
			if len(f.cache) >= limit {
				// Start over rather than keep a big map: clear would
				// keep its buckets.
				f.cache = make(map[InodeID][]LayerID, 64)
			}
			f.cache[ino] = frozen
			f.cacheMu.Unlock()
		}
	}
	return frozen, nil
}

// getInode resolves ino top-down. It returns ENOENT for a missing or deleted
// inode, plus the layer holding the visible record. The top layer is read
// with one Get (not found: it holds no record), so an inode written in the
// top layer costs one point lookup; the frozen layers go through layersOf.
func (f *View) getInode(tx kv.Txn, st state, ino InodeID) (*inode, LayerID, error) {
	n, err := layerInode(tx, st.stack[0], ino)
	if err != nil {
		return nil, 0, err
	}
	if n != nil {
		if n.Deleted {
			return nil, 0, syscall.ENOENT
		}
		return n, st.stack[0], nil
	}
	frozen, err := f.frozenLayersOf(tx, st, ino)
	if err != nil {
		return nil, 0, err
	}
	for _, l := range frozen {
		n, err := layerInode(tx, l, ino)
		if err != nil {
			return nil, 0, err
		}
		if n == nil {
			continue // cache hint raced with a newer snapshot
		}
		if n.Deleted {
			return nil, 0, syscall.ENOENT
		}
		return n, l, nil
	}
	return nil, 0, syscall.ENOENT
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

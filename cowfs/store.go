package cowfs

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
)

// Store is the copy-on-write filesystem of one kv.Store. It owns every key
// cowfs defines ('l', 'L', 'c' and 'M'), the id allocator, the block
// tracker and the options every view shares; views, new trees, merges,
// folds and the block sweep all start from it. A caller keeps its own
// keys (other prefixes) in the same kv.Store, through KV or a Txn's KV.
// It is safe for concurrent use.
type Store struct {
	kv        kv.Store      // read only
	alloc     *Allocator    // read only
	tracker   *sweepTracker // read only
	blobs     blobs.Store   // opts.Blobs: content store, nil for the kv store's 'c' keys; read only
	opts      Options       // read only, defaults filled in
	xs        *crossSweep   // with opts.Leases: the handshake with other servers' sweeps (xsweep.go); read only
	known     *knownBlobs   // blobs uploaded or found lately: with a blob store and no Leases, else nil; read only
	blobWrite int           // how putBlob uploads (blobWriteCreate but in a benchmark)
	format3   atomic.Bool   // the store is of format 3 (extentsFormat)
	// frozen caches the frozen layers' block references for every view;
	// store-level changes of references (rechunk, coalesce, fold, merge)
	// tell it which layers they change (readcache.go). Read only.
	frozen *frozenCache
}

// Open returns the Store of st. It checks the store's format (see
// openFormat: a new store is stamped with the current one, a store of a
// newer format is refused with ErrFormat) and sets opts.LegacyNameSlots
// for a store that predates form-insensitive names. Use one Store per
// kv.Store: the allocator and the tracker must be the only ones.
func Open(ctx context.Context, st kv.Store, opts Options) (*Store, error) {
	if st == nil {
		return nil, errors.New("cowfs: Open: the kv.Store is nil")
	}
	legacy, err := openFormat(ctx, st)
	if err != nil {
		return nil, err
	}
	opts.LegacyNameSlots = opts.LegacyNameSlots || legacy
	return newStore(st, opts), nil
}

// newStore is Open without the format check.
func newStore(st kv.Store, opts Options) *Store {
	opts.EnsureDefaults()
	s := &Store{kv: st, alloc: newAllocator(st), tracker: &sweepTracker{}, blobs: opts.Blobs, opts: opts, xs: newCrossSweep(opts.Leases), frozen: newFrozenCache(opts.BlockCacheBytes)}
	if opts.Blobs != nil && opts.Leases == nil {
		s.known = newKnownBlobs()
	}
	return s
}

// KV returns the underlying kv.Store, for the caller's own keys: cowfs's
// keys are read and written only through the Store's methods.
func (s *Store) KV() kv.Store { return s.kv }

// Options returns the store's options, defaults filled in.
func (s *Store) Options() Options { return s.opts }

// View returns a view of stack (top first). Unless Options.ReadOnly,
// writes go to stack[0], which must not be the top of any other view. It
// costs no store access.
func (s *Store) View(stack []LayerID) *View {
	fence := &kv.Fence{}
	ctx, cancel := context.WithCancel(kv.WithFence(context.Background(), fence))
	f := &View{s: s, store: s.kv, alloc: s.alloc, opts: s.opts, bs: uint64(s.opts.BlockSize),
		ctx: ctx, stop: cancel, fence: fence, stack: append([]LayerID(nil), stack...), cache: map[InodeID]*frozenInode{}}
	f.dirty.Store(true)
	return f
}

// FreshView is View for a stack whose top was just created empty:
// TopDirty reports false until something writes.
func (s *Store) FreshView(stack []LayerID) *View {
	f := s.View(stack)
	f.dirty.Store(false)
	return f
}

// OpenView returns a view of the stack whose top is top, read from the
// store.
func (s *Store) OpenView(ctx context.Context, top LayerID) (*View, error) {
	stack, err := s.Stack(ctx, top)
	if err != nil {
		return nil, err
	}
	return s.View(stack), nil
}

// Stack returns the stack whose top is top, top first.
func (s *Store) Stack(ctx context.Context, top LayerID) ([]LayerID, error) {
	return loadStack(ctx, s.kv, top)
}

// NewLayerID allocates a layer id. Nothing is stored until Txn.PutLayer.
func (s *Store) NewLayerID(ctx context.Context) (LayerID, error) { return s.alloc.NewLayerID(ctx) }

// Next returns a new value of the named store-wide counter (see
// Allocator.Next): the caller's ids, such as branch ids, come from here.
func (s *Store) Next(ctx context.Context, counter string) (uint64, error) {
	return s.alloc.Next(ctx, counter)
}

// NewTree creates a bottom layer holding an empty root directory with the
// given mode and owner, and returns it. with, when not nil, runs in the
// same transaction (to store the caller's record of the tree), so either
// both are stored or neither is.
func (s *Store) NewTree(ctx context.Context, rootMode, uid, gid uint32, with func(tx *Txn, l LayerID) error) (LayerID, error) {
	l, err := s.NewLayerID(ctx)
	if err != nil {
		return 0, err
	}
	err = s.Update(ctx, func(tx *Txn) error {
		if err := tx.PutLayer(l, 0); err != nil {
			return err
		}
		t := now()
		root := &inode{Ino: RootIno, Gen: 1, Type: TypeDir, Mode: rootMode & ModePerm, Nlink: 2,
			UID: uid, GID: gid, Atime: t, Mtime: t, Ctime: t}
		if err := tx.tx.Set(inodeKey(l, RootIno), root.encode()); err != nil {
			return err
		}
		if with != nil {
			return with(tx, l)
		}
		return nil
	})
	return l, err
}

// Txn is one transaction over the store: its methods read and write
// cowfs's keys, and KV gives the caller the same transaction for its own.
// Like a kv.Txn, it must not be used after the callback that received it
// returns, and a read-write one may run more than once.
type Txn struct {
	tx kv.Txn
	s  *Store // the store it is a transaction of
}

// KV returns the transaction, for the caller's own keys.
func (t *Txn) KV() kv.Txn { return t.tx }

// Update runs fn in a read-write transaction (see kv.Store.Update).
func (s *Store) Update(ctx context.Context, fn func(tx *Txn) error) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error { return fn(&Txn{tx, s}) })
}

// Read runs fn in a read-only snapshot transaction (see kv.Store.View).
func (s *Store) Read(ctx context.Context, fn func(tx *Txn) error) error {
	return s.kv.View(ctx, func(tx kv.Txn) error { return fn(&Txn{tx, s}) })
}

// PutLayer records layer l over below (0 for a bottom layer). A new layer
// is empty; over an existing one, it re-points l.
func (t *Txn) PutLayer(l, below LayerID) error { return putLayer(t.tx, l, below) }

// Below returns the layer below l (0 for a bottom layer).
func (t *Txn) Below(l LayerID) (LayerID, error) { return layerBelow(t.tx, l) }

// LayerEmpty reports whether layer l holds no inode, entry or data.
func (s *Store) LayerEmpty(ctx context.Context, l LayerID) (bool, error) {
	var empty bool
	err := s.kv.View(ctx, func(tx kv.Txn) error {
		var err error
		empty, err = layerEmpty(tx, l)
		return err
	})
	return empty, err
}

// LayerEmpty is Store.LayerEmpty in a transaction: an Update that asks
// conflicts with a write into l committed meanwhile.
func (t *Txn) LayerEmpty(l LayerID) (bool, error) { return layerEmpty(t.tx, l) }

// Sync makes everything written so far durable against power loss.
func (s *Store) Sync(ctx context.Context) error { return s.kv.Sync(ctx) }

// Referrers counts, for every layer with a layer over it, the layers
// directly over it.
func (t *Txn) Referrers() (map[LayerID]int, error) {
	refs := map[LayerID]int{}
	err := eachLayer(t.tx, false, func(_, below LayerID) (bool, error) {
		if below != 0 {
			refs[below]++
		}
		return true, nil
	})
	return refs, err
}

// LayersOver lists the layers that lie directly over x, from a View (a
// pass over every layer record, which an etcd transaction could not
// check). For Repoint, by a caller that keeps new layers from being put
// over x meanwhile.
func (s *Store) LayersOver(ctx context.Context, x LayerID) ([]LayerID, error) {
	var over []LayerID
	err := s.kv.View(ctx, func(tx kv.Txn) error {
		over = over[:0]
		return eachLayer(tx, false, func(l, below LayerID) (bool, error) {
			if below == x {
				over = append(over, l)
			}
			return true, nil
		})
	})
	return over, err
}

// Repoint puts the layers of over (from LayersOver) that still lie
// directly over x over y instead (after FoldDown copied x into y),
// reading only their records.
func (t *Txn) Repoint(x, y LayerID, over []LayerID) error {
	for _, l := range over {
		below, err := layerBelow(t.tx, l)
		if errors.Is(err, kv.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		if below != x {
			continue
		}
		if err := putLayer(t.tx, l, y); err != nil {
			return err
		}
	}
	return nil
}

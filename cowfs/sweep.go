package cowfs

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
)

// Reclaiming storage. A layer that no live stack holds is garbage (layer
// ids are never reused, so it stays garbage): Txn.Unreachable finds such
// layers and Store.DeleteLayer deletes them. Block content that no block
// reference of a live layer uses is garbage too: a Sweep deletes it,
// while writers go on, with the store's sweepTracker keeping what they
// reference meanwhile.

// reachable returns every layer in the stack of one of roots.
func reachable(tx kv.Txn, roots []LayerID) (map[LayerID]bool, error) {
	live := map[LayerID]bool{}
	for _, top := range roots {
		for l := top; l != 0 && !live[l]; {
			live[l] = true
			below, err := layerBelow(tx, l)
			if err != nil {
				return nil, err
			}
			l = below
		}
	}
	return live, nil
}

// Reachable returns, in layer order, every layer in the stack of one of
// roots.
func (t *Txn) Reachable(roots []LayerID) ([]LayerID, error) {
	live, err := reachable(t.tx, roots)
	if err != nil {
		return nil, err
	}
	out := make([]LayerID, 0, len(live))
	for l := range live {
		out = append(out, l)
	}
	slices.Sort(out)
	return out, nil
}

// Unreachable returns, in layer order, every layer of the store that is in
// the stack of none of roots.
func (t *Txn) Unreachable(roots []LayerID) ([]LayerID, error) {
	live, err := reachable(t.tx, roots)
	if err != nil {
		return nil, err
	}
	var garbage []LayerID
	err = eachLayer(t.tx, true, func(l, _ LayerID) (bool, error) {
		if !live[l] {
			garbage = append(garbage, l)
		}
		return true, nil
	})
	return garbage, err
}

// sweepTracker coordinates writers with the block sweep. While a sweep
// runs, every content hash a committing write references is recorded, so
// the sweep keeps blocks that became referenced after its mark snapshot.
// Writers commit under mu's read side; the sweep takes the write side to
// start and to delete. It follows one sweep at a time: a begin during a
// sweep would drop that sweep's records, so callers serialise their
// sweeps.
type sweepTracker struct {
	mu     sync.RWMutex // protects the following
	active bool
	seenMu sync.Mutex // protects seen under mu's read side; a leaf
	seen   map[string]struct{}
}

// begin starts a sweep: from now on referenced hashes are recorded. snap
// is called under the lock, so every write either committed before it or
// is recorded.
func (t *sweepTracker) begin(snap func()) {
	t.mu.Lock()
	t.active = true
	t.seen = map[string]struct{}{}
	snap()
	t.mu.Unlock()
}

// sweep runs del under the lock with a predicate telling whether a hash
// was referenced since begin.
func (t *sweepTracker) sweep(del func(seen func(h []byte) bool) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return del(func(h []byte) bool { _, ok := t.seen[string(h)]; return ok })
}

// end stops recording.
func (t *sweepTracker) end() {
	t.mu.Lock()
	t.active = false
	t.seen = nil
	t.mu.Unlock()
}

// commitWith runs fn under the tracker's read lock; fn records the hashes
// its committed transaction referenced. Holding the read lock across the
// commit means the sweep's begin and sweep (write lock) see either all of
// the write or none of it, and a recorded hash is never swept.
func (t *sweepTracker) commitWith(fn func(record func([][]byte)) error) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return fn(func(hs [][]byte) {
		if !t.active {
			return
		}
		t.seenMu.Lock()
		for _, h := range hs {
			t.seen[string(h)] = struct{}{}
		}
		t.seenMu.Unlock()
	})
}

// sweepBatch is how many blocks one sweep transaction deletes at most
// (fewer when the store's Limits say so). Each runs under the tracker's
// write lock, which every data write waits for, so it stays small: a few
// milliseconds.
const sweepBatch = 256

// blobSweepBatch is sweepBatch for content in a blob store, where each
// deletion is a request (about a millisecond to a local S3 service).
const blobSweepBatch = 16

// Sweep is one block sweep, from BeginSweep to End.
type Sweep struct {
	s    *Store
	snap kv.Snapshot
	live map[LayerID]bool
}

// BeginSweep starts a block sweep. roots runs once, on the snapshot the
// sweep marks from, and returns the layers whose stacks are live (every
// layer of those stacks is); from then on every write records the content
// it references, so Run keeps it. The caller keeps roots' answer in step
// with the store (holds what stops stacks from changing) until BeginSweep
// returns, runs one sweep at a time (a second would drop the first's
// records), and calls End.
func (s *Store) BeginSweep(roots func(tx *Txn) ([]LayerID, error)) (*Sweep, error) {
	w := &Sweep{s: s}
	var err error
	s.tracker.begin(func() {
		w.snap = s.kv.NewSnapshot()
		var rs []LayerID
		if rs, err = roots(&Txn{w.snap, s}); err == nil {
			w.live, err = reachable(w.snap, rs)
		}
	})
	if err != nil {
		w.End()
		return nil, err
	}
	return w, nil
}

// Run deletes the content no live layer references in the snapshot,
// except what writes referenced since BeginSweep, in small transactions.
// It returns how many unreferenced blocks it found and went through (those
// a write referenced meanwhile included), also when it fails part way.
func (w *Sweep) Run(ctx context.Context) (int, error) {
	marked := map[[32]byte]struct{}{}
	for l := range w.live {
		err := w.snap.Iterate(append(layerPrefix(l), kindData), nil, false, func(k, v []byte) (bool, error) {
			refHashes(v, func(h []byte) { marked[[32]byte(h)] = struct{}{} })
			return true, nil
		})
		if err != nil {
			return 0, err
		}
	}
	if w.s.xs != nil {
		return w.runLeased(ctx, marked)
	}
	var cands [][]byte
	err := w.s.listContent(ctx, w.snap, func(h []byte) error {
		if _, ok := marked[[32]byte(h)]; !ok {
			cands = append(cands, append([]byte(nil), h...))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	size := min(sweepBatch, deleteBatch(w.s.kv, 33)) // content keys: 'c' and the hash
	if w.s.blobs != nil {
		// Each deletion is a request to the blob store, under the lock
		// writers wait for.
		size = blobSweepBatch
	}
	for i := 0; i < len(cands); i += size {
		batch := cands[i:min(i+size, len(cands))]
		err := w.s.tracker.sweep(func(seen func([]byte) bool) error {
			if w.s.blobs != nil {
				for _, h := range batch {
					if seen(h) {
						continue
					}
					w.s.known.forget(blobs.Key(h)) // before: a failed delete may have deleted
					if err := w.s.blobs.Delete(ctx, blobs.Key(h)); err != nil {
						return fmt.Errorf("cowfs: sweep: deleting unreferenced content from the blob store: %w", err)
					}
				}
				return nil
			}
			return w.s.kv.Update(ctx, func(tx kv.Txn) error {
				for _, h := range batch {
					if seen(h) {
						continue
					}
					if err := tx.Delete(contentKey(h)); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return n, err
		}
		n += len(batch)
	}
	return n, nil
}

// End ends the sweep: writes stop recording, the snapshot is released.
func (w *Sweep) End() {
	w.s.tracker.end()
	if w.snap != nil {
		w.snap.Discard()
		w.snap = nil
	}
}

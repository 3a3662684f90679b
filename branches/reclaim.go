package branches

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Reclamation is mark-and-sweep, in the background:
//  1. Layers: every layer not in the stack of a live or invalidated branch
//     or of a checkpoint is garbage (ids are never reused, so a garbage
//     layer stays garbage) and is deleted in small transactions.
//  2. Blocks: content no live layer references is deleted. Writers that
//     commit while the sweep runs record their hashes in the Tracker, and
//     the sweep skips them.

func (m *Manager) kickReclaim() {
	select {
	case m.reclaim <- struct{}{}:
	default:
	}
}

func (m *Manager) reclaimLoop(ctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.reclaim:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.opts.ReclaimDelay):
		}
		m.gc.mu.Lock()
		m.reclaimPass(ctx)
		m.gc.mu.Unlock()
		m.metrics.passes.Add(1)
	}
}

// reclaimPass is one pass of the background reclaimer. Caller holds gc.mu.
func (m *Manager) reclaimPass(ctx context.Context) {
	// Reclaim first: garbage layers count as referrers when folding.
	st, err := m.Reclaim(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.opts.Logger.Warn("branches: reclaim failed", "err", err)
		}
		return
	}
	n, err := m.Fold(ctx)
	if err != nil && ctx.Err() == nil {
		m.opts.Logger.Warn("branches: fold failed", "err", err)
	}
	if n > 0 {
		st2, err := m.Reclaim(ctx)
		if err != nil && ctx.Err() == nil {
			m.opts.Logger.Warn("branches: reclaim failed", "err", err)
		}
		st.Blocks += st2.Blocks
	}
	m.sweptBlocks(ctx, st.Blocks)
}

// sweepBatch is how many blocks one sweep transaction deletes. Each runs
// under the tracker's write lock, which every data write waits for, so it
// stays small: a few milliseconds.
const sweepBatch = 256

// ReclaimStats tells what a reclamation pass removed.
type ReclaimStats struct {
	Layers int `json:"layers"`
	Keys   int `json:"keys"`
	Blocks int `json:"blocks"`
	// Checkpoints counts the checkpoint records of committed and aborted
	// branches deleted: nothing can use them any more.
	Checkpoints int `json:"checkpoints"`
}

// liveLayers returns every layer reachable from a live or invalidated
// branch or from a checkpoint of one. Caller holds opMu.
func (m *Manager) liveLayers(ctx context.Context, tx kv.Txn) (map[cowfs.LayerID]bool, error) {
	live := map[cowfs.LayerID]bool{}
	walk := func(top cowfs.LayerID) error {
		for l := top; l != 0 && !live[l]; {
			live[l] = true
			below, err := cowfs.Below(tx, l)
			if err != nil {
				return err
			}
			l = below
		}
		return nil
	}
	m.mu.RLock()
	var tops []cowfs.LayerID
	var ids []BranchID
	for _, b := range m.byName {
		tops = append(tops, b.rec.Top)
		ids = append(ids, b.rec.ID)
	}
	m.mu.RUnlock()
	for _, t := range tops {
		if err := walk(t); err != nil {
			return nil, err
		}
	}
	for _, id := range ids {
		var cps []cowfs.LayerID
		err := tx.Iterate(cpPrefix(id), nil, false, func(k, v []byte) (bool, error) {
			var cp checkpointRec
			if err := jsonUnmarshal(v, &cp); err != nil {
				return false, err
			}
			cps = append(cps, cp.Layer)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		for _, l := range cps {
			if err := walk(l); err != nil {
				return nil, err
			}
		}
	}
	return live, nil
}

// deadCheckpoints lists the keys of the checkpoint records of branches
// that are neither live nor invalidated. Caller holds opMu.
func (m *Manager) deadCheckpoints(tx kv.Txn) ([][]byte, error) {
	m.mu.RLock()
	keep := make(map[BranchID]bool, len(m.byName))
	for _, b := range m.byName {
		keep[b.rec.ID] = true
	}
	m.mu.RUnlock()
	var dead [][]byte
	err := tx.Iterate(cpPrefix(0)[:1], nil, true, func(k, _ []byte) (bool, error) {
		if len(k) < 9 {
			return false, fmt.Errorf("branches: bad checkpoint key %q", k)
		}
		if !keep[BranchID(binary.BigEndian.Uint64(k[1:9]))] {
			dead = append(dead, append([]byte(nil), k...))
		}
		return true, nil
	})
	return dead, err
}

// Reclaim runs one reclamation pass now. Passes run one at a time: the
// tracker follows one sweep.
func (m *Manager) Reclaim(ctx context.Context) (ReclaimStats, error) {
	m.gc.sweepMu.Lock()
	defer m.gc.sweepMu.Unlock()
	var st ReclaimStats
	// Phase 1: garbage layers.
	m.opMu.Lock()
	var garbage []cowfs.LayerID
	var deadCPs [][]byte
	err := m.store.View(ctx, func(tx kv.Txn) error {
		garbage, deadCPs = garbage[:0], deadCPs[:0]
		live, err := m.liveLayers(ctx, tx)
		if err != nil {
			return err
		}
		err = cowfs.EachLayer(tx, true, func(l, _ cowfs.LayerID) (bool, error) {
			if !live[l] {
				garbage = append(garbage, l)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		deadCPs, err = m.deadCheckpoints(tx)
		return err
	})
	m.opMu.Unlock()
	if err != nil {
		return st, err
	}
	// A branch that is committed or aborted stays so: its checkpoints can
	// go without opMu.
	for len(deadCPs) > 0 {
		n := min(len(deadCPs), 1000)
		err := m.store.Update(ctx, func(tx kv.Txn) error {
			for _, k := range deadCPs[:n] {
				if err := tx.Delete(k); err != nil && !errors.Is(err, kv.ErrNotFound) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return st, err
		}
		st.Checkpoints += n
		deadCPs = deadCPs[n:]
	}
	for _, l := range garbage {
		n, err := cowfs.DeleteLayer(ctx, m.store, l)
		st.Keys += n
		if err != nil {
			return st, err
		}
		st.Layers++
	}
	// Phase 2: unreferenced blocks.
	var snap kv.Snapshot
	var live map[cowfs.LayerID]bool
	var liveErr error
	m.opMu.Lock()
	m.tracker.Begin(func() {
		snap = m.store.NewSnapshot()
		live, liveErr = m.liveLayers(ctx, snap)
	})
	m.opMu.Unlock()
	defer m.tracker.End()
	defer snap.Discard()
	m.metrics.layers.Add(int64(st.Layers))
	if liveErr != nil {
		return st, liveErr
	}
	marked := map[[32]byte]struct{}{}
	for l := range live {
		err := cowfs.ReferencedHashes(snap, l, func(h []byte) { marked[[32]byte(h)] = struct{}{} })
		if err != nil {
			return st, err
		}
	}
	var cands [][]byte
	err = cowfs.ContentHashes(snap, func(h []byte) bool {
		if len(h) == 32 {
			if _, ok := marked[[32]byte(h)]; !ok {
				cands = append(cands, append([]byte(nil), h...))
			}
		}
		return true
	})
	if err != nil {
		return st, err
	}
	for i := 0; i < len(cands); i += sweepBatch {
		batch := cands[i:min(i+sweepBatch, len(cands))]
		err := m.tracker.Sweep(func(seen func([]byte) bool) error {
			return m.store.Update(ctx, func(tx kv.Txn) error {
				for _, h := range batch {
					if seen(h) {
						continue
					}
					if err := cowfs.DeleteContent(tx, h); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return st, err
		}
		st.Blocks += len(batch)
		m.metrics.blocks.Add(int64(len(batch)))
	}
	return st, nil
}

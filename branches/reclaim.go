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
//     layer stays garbage) and is deleted in small transactions
//     (cowfs.Txn.Unreachable, cowfs.Store.DeleteLayer).
//  2. Blocks: content no live layer references is deleted (cowfs.Sweep).
//     Writers that commit while the sweep runs record their hashes, and
//     the sweep skips them; with several servers, their writers and
//     sweeps follow cowfs's handshake instead.
//
// On a store several servers share, the live branches are those of the
// stored records (with the layers their commits are merging into), and a
// garbage layer waits sharedLayerGrace before it is deleted.

func (m *Manager) kickReclaim() {
	select {
	case m.reclaim <- struct{}{}:
	default:
	}
}

func (m *Manager) reclaimLoop(ctx context.Context) {
	defer m.wg.Done()
	var idle <-chan time.Time // armed by each pass: see Options.GCIdle
	var armed uint64          // m.activity when idle was armed
	var passEnd time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle:
			idle = nil
			if a := m.activity.Load(); a != armed && time.Since(passEnd) < gcIdleMaxWait*m.opts.GCIdle {
				// Clients worked meanwhile: wait for a pause in that too.
				armed, idle = a, time.After(m.opts.GCIdle)
				continue
			}
			m.gc.mu.Lock()
			m.idleGC(ctx)
			m.gc.mu.Unlock()
			continue
		case <-m.reclaim:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.opts.ReclaimDelay):
		}
		m.reclaimPasses(ctx)
		if m.opts.GCIdle > 0 && m.opts.GCAfterSwept >= 0 {
			armed, passEnd = m.activity.Load(), time.Now()
			idle = time.After(m.opts.GCIdle)
		}
	}
}

// gcIdleMaxWait bounds, in units of Options.GCIdle after a reclaimer pass,
// how long client work postpones the idle GC.
const gcIdleMaxWait = 6

// NoteActivity tells the reclaimer that a client did some work: the idle
// GC (Options.GCIdle), whose prune, sweep and rechunk read and rewrite
// files, waits for a pause in it. The NFS server calls it for the
// procedures that read or change data or names (not the attribute and
// status polls clients send while idle). It costs one atomic add.
func (m *Manager) NoteActivity() { m.activity.Add(1) }

// foldPerPass bounds the layers one reclaimer pass folds.
const foldPerPass = 16

// reclaimPasses runs reclaimer passes until one leaves nothing to fold,
// taking gc.mu for each, so GCs waiting for it go in between. Passes that
// each waited ReclaimDelay would fold foldPerPass layers per delay: fewer
// than a client committing a branch every few milliseconds adds, and
// main's stack would grow by a layer per committed branch, every lookup
// in it slower.
func (m *Manager) reclaimPasses(ctx context.Context) {
	for more := true; more && ctx.Err() == nil; {
		m.gc.mu.Lock()
		more = m.reclaimPass(ctx)
		m.gc.mu.Unlock()
		m.metrics.passes.Add(1)
	}
}

// reclaimPass is one pass of the background reclaimer. It reports whether
// it stopped folding at foldPerPass layers with more to fold. Caller holds
// gc.mu.
func (m *Manager) reclaimPass(ctx context.Context) (more bool) {
	// Reclaim first: garbage layers count as referrers when folding.
	st, err := m.Reclaim(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.opts.Logger.Warn("branches: reclaim failed", "err", err)
		}
		return false
	}
	n, err := m.fold(ctx, foldPerPass)
	if err != nil && ctx.Err() == nil {
		m.opts.Logger.Warn("branches: fold failed", "err", err)
	}
	more = err == nil && n == foldPerPass // in the next pass, after waiting GCs
	if n > 0 {
		st2, err := m.Reclaim(ctx)
		if err != nil && ctx.Err() == nil {
			m.opts.Logger.Warn("branches: reclaim failed", "err", err)
		}
		st.Blocks += st2.Blocks
	}
	m.sweptBlocks(ctx, st.Blocks)
	return more
}

// ReclaimStats tells what a reclamation pass removed.
type ReclaimStats struct {
	Layers int `json:"layers"`
	Keys   int `json:"keys"`
	Blocks int `json:"blocks"`
	// Checkpoints counts the checkpoint records of committed and aborted
	// branches deleted: nothing can use them any more.
	Checkpoints int `json:"checkpoints"`
}

// liveRoots returns the tops of the live and invalidated branches, the
// layers their commits are merging into, and the layers of their
// checkpoints: every layer of their stacks is live. Caller
// holds opMu. On a store several servers share (shared), the branches are
// those of the records in tx, not those this Manager holds: another
// server may have forked one this Manager has not heard of yet, or ended
// one it still holds (and deleted its layers).
func (m *Manager) liveRoots(tx kv.Txn) ([]cowfs.LayerID, error) {
	var roots []cowfs.LayerID
	var ids []BranchID
	if m.shared() {
		recs, err := liveRecords(tx)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			roots = append(roots, r.Top)
			if r.Merging != 0 {
				roots = append(roots, r.Merging)
			}
			ids = append(ids, r.ID)
		}
	} else {
		m.mu.RLock()
		for _, b := range m.byName {
			roots = append(roots, b.rec.Top)
			if b.rec.Merging != 0 {
				roots = append(roots, b.rec.Merging)
			}
			ids = append(ids, b.rec.ID)
		}
		m.mu.RUnlock()
	}
	for _, id := range ids {
		err := tx.Iterate(cpPrefix(id), nil, false, func(k, v []byte) (bool, error) {
			var cp checkpointRec
			if err := jsonUnmarshal(v, &cp); err != nil {
				return false, err
			}
			roots = append(roots, cp.Layer)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return roots, nil
}

// shared reports whether several servers may share the store: its cowfs
// store orders block writes and sweeps with theirs (cowfs.Options.Leases).
func (m *Manager) shared() bool { return m.cow.Options().Leases != nil }

// liveRecords returns the stored records of the live and invalidated
// branches.
func liveRecords(tx kv.Txn) ([]record, error) {
	var recs []record
	err := tx.Iterate(branchKey(0)[:1], nil, false, func(k, v []byte) (bool, error) {
		var r record
		if err := jsonUnmarshal(v, &r); err != nil {
			return false, fmt.Errorf("branches: corrupt record %x: %w", k, err)
		}
		if r.State == StateLive || r.State == StateInvalidated {
			recs = append(recs, r)
		}
		return true, nil
	})
	return recs, err
}

// sharedLayerGrace: on a shared store, a layer is deleted only once this
// Manager's passes have seen it garbage for this long. A commit names
// the layer it merges into in its branch's record (record.Merging)
// before it stores anything there, so no commit depends on the grace;
// it covers a server of an older version, whose commit stages its merge
// in a layer no record names until the commit ends. A variable for
// tests.
var sharedLayerGrace = 10 * time.Minute

// graceLayers returns the layers of garbage that have been garbage for
// sharedLayerGrace, and remembers when the others were first seen.
// Caller holds gc.sweepMu.
func (m *Manager) graceLayers(garbage []cowfs.LayerID, now time.Time) []cowfs.LayerID {
	seen := make(map[cowfs.LayerID]time.Time, len(garbage))
	var due []cowfs.LayerID
	for _, l := range garbage {
		first, ok := m.gc.garbageSince[l]
		if !ok {
			first = now
		}
		seen[l] = first
		if now.Sub(first) >= sharedLayerGrace {
			due = append(due, l)
		}
	}
	m.gc.garbageSince = seen
	return due
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
	if m.shared() {
		// Branches other servers forked that this Manager has not
		// heard of yet.
		recs, err := liveRecords(tx)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			keep[r.ID] = true
		}
	}
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
	err := m.cow.Read(ctx, func(tx *cowfs.Txn) error {
		roots, err := m.liveRoots(tx.KV())
		if err != nil {
			return err
		}
		if garbage, err = tx.Unreachable(roots); err != nil {
			return err
		}
		deadCPs, err = m.deadCheckpoints(tx.KV())
		return err
	})
	m.opMu.Unlock()
	if err != nil {
		return st, err
	}
	if m.shared() {
		garbage = m.graceLayers(garbage, time.Now())
	}
	// A branch that is committed or aborted stays so: its checkpoints can
	// go without opMu.
	for len(deadCPs) > 0 {
		n := min(len(deadCPs), m.cow.DeleteBatch(9+64)) // a checkpoint key: prefix, branch id, label
		err := m.cow.KV().Update(ctx, func(tx kv.Txn) error {
			for _, k := range deadCPs[:n] {
				if err := tx.Delete(k); err != nil && !errors.Is(err, kv.ErrNotFound) {
					return err
				}
			}
			return nil
		})
		m.cps.committed(err, nil, deadCPs[:n], nil, 0)
		if err != nil {
			return st, err
		}
		st.Checkpoints += n
		deadCPs = deadCPs[n:]
	}
	for _, l := range garbage {
		n, err := m.cow.DeleteLayer(ctx, l)
		st.Keys += n
		if err != nil {
			return st, err
		}
		st.Layers++
	}
	// Phase 2: unreferenced blocks.
	m.opMu.Lock()
	sw, err := m.cow.BeginSweep(func(tx *cowfs.Txn) ([]cowfs.LayerID, error) { return m.liveRoots(tx.KV()) })
	m.opMu.Unlock()
	m.metrics.layers.Add(int64(st.Layers))
	if err != nil {
		return st, err
	}
	defer sw.End()
	n, err := sw.Run(ctx)
	st.Blocks += n
	m.metrics.blocks.Add(int64(n))
	if err != nil {
		return st, err
	}
	return st, nil
}

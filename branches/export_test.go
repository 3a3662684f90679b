package branches

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/branchnfs/branchnfs/kv"
)

// Store returns the underlying store (for tests).
func (m *Manager) Store() kv.Store { return m.cow.KV() }

// Views counts the branches the Manager holds in memory: all, and those
// committed or aborted that still hold a view.
func (m *Manager) Views() (all, gone int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, b := range m.byID {
		all++
		if b.fs == nil {
			continue
		}
		if b.rec.State == StateCommitted || b.rec.State == StateAborted {
			gone++
		}
	}
	return all, gone
}

// SetMergeHook makes fn run while a commit merges with the parent's view
// unlocked.
func (m *Manager) SetMergeHook(fn func()) { m.mergeHook = fn }

// SetSharedLayerGrace sets how long a garbage layer of a shared store
// waits before it is deleted, and returns a function that restores it.
func SetSharedLayerGrace(d time.Duration) (restore func()) {
	old := sharedLayerGrace
	sharedLayerGrace = d
	return func() { sharedLayerGrace = old }
}

// LockOps holds the lifecycle lock, as a long merge or diff does, until
// the returned function is called.
func (m *Manager) LockOps() (unlock func()) {
	m.opMu.Lock()
	return m.opMu.Unlock
}

// PutLease writes a lease on branch name directly, as an older version
// could (on the root branch too).
func (m *Manager) PutLease(ctx context.Context, name string, expires time.Time) error {
	b, err := m.live(name)
	if err != nil {
		return err
	}
	v, err := json.Marshal(Meta{LeaseExpires: &expires})
	if err != nil {
		return err
	}
	return m.cow.KV().Update(ctx, func(tx kv.Txn) error { return tx.Set(metaKey(b.rec.ID), v) })
}

// CheckpointDecodes counts the checkpoint records folds decoded.
func (m *Manager) CheckpointDecodes() int64 { return m.cps.decodes.Load() }

// CheckpointIndexAgrees reports how the in-memory checkpoint index differs
// from the records in the store (nil if it does not), and how many records
// there are.
func (m *Manager) CheckpointIndexAgrees(ctx context.Context) (int, error) {
	var want cpIndex
	want.mu.Lock()
	err := want.load(ctx, m.cow.KV())
	want.mu.Unlock()
	if err != nil {
		return 0, err
	}
	m.cps.mu.Lock()
	defer m.cps.mu.Unlock()
	if m.cps.stale {
		return 0, fmt.Errorf("index stale")
	}
	if len(m.cps.layerOf) != len(want.layerOf) {
		return 0, fmt.Errorf("index holds %d records, store %d", len(m.cps.layerOf), len(want.layerOf))
	}
	for k, l := range want.layerOf {
		if got, ok := m.cps.layerOf[k]; !ok || got != l {
			return 0, fmt.Errorf("record %q: index says layer %d (%v), store %d", k, got, ok, l)
		}
		if _, ok := m.cps.at[l][k]; !ok {
			return 0, fmt.Errorf("record %q missing from the index's layer %d", k, l)
		}
	}
	n := 0
	for _, ks := range m.cps.at {
		n += len(ks)
	}
	if n != len(want.layerOf) {
		return 0, fmt.Errorf("index's layers hold %d records, store %d", n, len(want.layerOf))
	}
	return n, nil
}

// CheckpointLayers returns each checkpoint record's layer, read from the
// store.
func (m *Manager) CheckpointLayers(ctx context.Context) (map[string]uint64, error) {
	var ix cpIndex
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.load(ctx, m.cow.KV()); err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for k, l := range ix.layerOf {
		out[k] = uint64(l)
	}
	return out, nil
}

// RunReclaimer runs what the background reclaimer runs after each
// ReclaimDelay.
func (m *Manager) RunReclaimer(ctx context.Context) { m.reclaimPasses(ctx) }

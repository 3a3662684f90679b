package branches

import (
	"context"
	"encoding/json"
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

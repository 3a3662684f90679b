package branches

import "github.com/branchnfs/branchnfs/kv"

// Store returns the underlying store (for tests).
func (m *Manager) Store() kv.Store { return m.store }

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

package branches

import "github.com/branchnfs/branchnfs/kv"

// Store returns the underlying store (for tests).
func (m *Manager) Store() kv.Store { return m.store }

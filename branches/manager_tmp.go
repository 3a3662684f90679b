package branches

// TEMPORARY: replaced by the real implementation.

import (
	"context"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Manager owns the branches of one store.
type Manager struct{}

// Options configures a Manager. The zero value means defaults, except Store.
type Options struct {
	Store kv.Store
	// Ignore lists name patterns (path.Match on the base name) kept out of
	// diffs and merge conflicts. nil means DefaultIgnore.
	Ignore []string
}

// Open opens the branches of a store, creating branch main on first use.
func Open(ctx context.Context, opts Options) (*Manager, error) { panic("todo") }

func (m *Manager) Fork(ctx context.Context, parent, name string) (Info, error) { panic("todo") }
func (m *Manager) ForkCheckpoint(ctx context.Context, parent, label, name string) (Info, error) {
	panic("todo")
}
func (m *Manager) Commit(ctx context.Context, name string) (CommitResult, error) { panic("todo") }
func (m *Manager) Abort(ctx context.Context, name string) (AbortResult, error)   { panic("todo") }
func (m *Manager) Checkpoint(ctx context.Context, name, label string) (Checkpoint, error) {
	panic("todo")
}
func (m *Manager) Restore(ctx context.Context, name, label string) error  { panic("todo") }
func (m *Manager) List(ctx context.Context) ([]Info, error)               { panic("todo") }
func (m *Manager) Get(ctx context.Context, name string) (Info, error)     { panic("todo") }
func (m *Manager) Diff(ctx context.Context, name string) (Diff, error)    { panic("todo") }
// View returns the live view of a branch by name. Errors: ErrNotFound,
// ErrInvalidated (an *InvalidatedError), ErrAborted.
func (m *Manager) View(name string) (*cowfs.FS, Info, error) { panic("todo") }
// ViewByID is View by branch id (for NFS handles).
func (m *Manager) ViewByID(id BranchID) (*cowfs.FS, Info, error) { panic("todo") }
// Secret returns the store's random 32-byte key for MACs on file handles.
func (m *Manager) Secret() []byte { panic("todo") }
func (m *Manager) Sync(ctx context.Context) error { panic("todo") }
func (m *Manager) Close() error                   { panic("todo") }

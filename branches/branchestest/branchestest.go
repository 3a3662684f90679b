// Package branchestest opens branch managers over fresh stores for the
// tests of every package that needs one (branches, nfsserver, control,
// attempts): one setup, so that a change to how a store is opened is made
// once.
package branchestest

import (
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// NewManager opens a Manager with opts, over a fresh Badger store in a
// temporary directory when opts.Store is nil. The manager (and the store
// it opened) are closed when tb ends.
func NewManager(tb testing.TB, opts branches.Options) *branches.Manager {
	tb.Helper()
	if opts.Store == nil {
		opts.Store = kvtest.NewDiskStore(tb)
	}
	m, err := branches.Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("branchestest: open branches: %v", err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

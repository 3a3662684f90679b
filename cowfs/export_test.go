package cowfs

import (
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// Test-only API: tests build layer stacks by hand.

// NewLayerOver creates an empty layer over below and returns it.
func (s *Store) NewLayerOver(ctx context.Context, below LayerID) (LayerID, error) {
	l, err := s.NewLayerID(ctx)
	if err != nil {
		return 0, err
	}
	err = s.Update(ctx, func(tx *Txn) error { return tx.PutLayer(l, below) })
	return l, err
}

// pushLayer freezes f's top y under a new empty layer x, which becomes
// f's top.
func pushLayer(t testing.TB, f *View) (x, y LayerID) {
	t.Helper()
	y = f.Top()
	x, err := f.s.NewLayerOver(context.Background(), y)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetTop(x); err != nil {
		t.Fatal(err)
	}
	return x, y
}

// SetTop re-points the view at another layer stack (after a fork, commit or
// restore changed it). In-flight calls finish on the old stack first.
func (f *View) SetTop(top LayerID) error {
	stack, err := loadStack(f.ctx, f.store, top)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.setStackLocked(stack)
	f.mu.Unlock()
	return nil
}

// Top returns the view's top layer.
func (f *View) Top() LayerID {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.stack[0]
}

// BlockSize returns the data block size.
func (f *View) BlockSize() int { return int(f.bs) }

// CacheLen returns the number of entries in the view's inode cache.
func (f *View) CacheLen() int {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	return len(f.cache)
}

// Store returns the store the view is a view of.
func (f *View) Store() *Store { return f.s }

// openStore is Open for tests: it fails the test on error.
func openStore(t testing.TB, st kv.Store, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

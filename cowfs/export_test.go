package cowfs

import (
	"context"

	"github.com/branchnfs/branchnfs/kv"
)

// Test-only API: tests build layer stacks by hand.

// NewLayerOver creates an empty layer over below and returns it.
func NewLayerOver(ctx context.Context, store kv.Store, alloc *Allocator, below LayerID) (LayerID, error) {
	l, err := alloc.NewLayerID(ctx)
	if err != nil {
		return 0, err
	}
	err = store.Update(ctx, func(tx kv.Txn) error { return PutLayer(tx, l, below) })
	return l, err
}

// SetTop re-points the view at another layer stack (after a fork, commit or
// restore changed it). In-flight calls finish on the old stack first.
func (f *View) SetTop(top LayerID) error {
	stack, err := LoadStack(f.ctx, f.store, top)
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

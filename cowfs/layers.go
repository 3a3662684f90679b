package cowfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/branchnfs/branchnfs/kv"
)

// A layer record holds the layer below it (0 for a bottom layer).
func encodeLayer(below LayerID) []byte { return u64(nil, uint64(below)) }

// loadStack returns the stack whose top is top, top first.
func loadStack(ctx context.Context, store kv.Store, top LayerID) ([]LayerID, error) {
	var stack []LayerID
	err := store.View(ctx, func(tx kv.Txn) error {
		stack = stack[:0]
		for l := top; l != 0; {
			stack = append(stack, l)
			if len(stack) > 1<<16 {
				return fmt.Errorf("cowfs: layer stack of %d too deep (cycle?)", top)
			}
			v, err := tx.Get(layerKey(l))
			if err != nil {
				return fmt.Errorf("cowfs: layer %d: %w", l, err)
			}
			if len(v) < 8 {
				return errCorrupt
			}
			l = LayerID(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return stack, err
}

// layerBelow returns the layer below l (0 for a bottom layer).
func layerBelow(tx kv.Txn, l LayerID) (LayerID, error) {
	v, err := tx.Get(layerKey(l))
	if err != nil {
		return 0, fmt.Errorf("cowfs: layer %d: %w", l, err)
	}
	if len(v) < 8 {
		return 0, errCorrupt
	}
	return LayerID(binary.BigEndian.Uint64(v)), nil
}

// NewLayerID allocates a layer id. Nothing is stored until PutLayer.
func (a *Allocator) NewLayerID(ctx context.Context) (LayerID, error) {
	v, err := a.Next(ctx, "layer")
	return LayerID(v), err
}

// eachLayer calls fn with every layer of the store and the layer below it
// (0 for a bottom layer), in layer order, until fn returns false or an
// error. With keysOnly, below is not read and fn gets 0 for it.
func eachLayer(tx kv.Txn, keysOnly bool, fn func(l, below LayerID) (bool, error)) error {
	return tx.Iterate([]byte{pfxLayer}, nil, keysOnly, func(k, v []byte) (bool, error) {
		if len(k) != 9 || !keysOnly && len(v) < 8 {
			return false, errCorrupt
		}
		var below LayerID
		if !keysOnly {
			below = LayerID(binary.BigEndian.Uint64(v))
		}
		return fn(LayerID(binary.BigEndian.Uint64(k[1:])), below)
	})
}

// putLayer records layer l over below, inside the caller's transaction.
func putLayer(tx kv.Txn, l, below LayerID) error {
	return tx.Set(layerKey(l), encodeLayer(below))
}

// layerEmpty reports whether layer l holds no inode, entry or data.
func layerEmpty(tx kv.Txn, l LayerID) (bool, error) {
	empty := true
	err := tx.Iterate(layerPrefix(l), nil, true, func(k, v []byte) (bool, error) {
		empty = false
		return false, nil
	})
	return empty, err
}

// DeleteLayer removes every key of layer l in batches of small transactions
// (used to reclaim layers nothing references any more). It returns the
// number of keys removed.
func (s *Store) DeleteLayer(ctx context.Context, l LayerID) (total int, err error) {
	s.frozen.begin([]LayerID{l})
	defer func() {
		s.frozen.end([]LayerID{l})
		if err == nil {
			s.frozen.forget(l)
		}
	}()
	total, err = deletePrefix(ctx, s.kv, layerPrefix(l))
	if err != nil {
		return total, err
	}
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		err := tx.Delete(layerKey(l))
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		return err
	})
	return total, err
}

// deletePrefix deletes every key with prefix pfx, in transactions of at
// most deleteBatch keys, and returns how many it deleted.
func deletePrefix(ctx context.Context, store kv.Store, pfx []byte) (int, error) {
	total := 0
	for {
		var keys [][]byte
		err := store.View(ctx, func(tx kv.Txn) error {
			keys = keys[:0]
			return tx.Iterate(pfx, nil, true, func(k, _ []byte) (bool, error) {
				keys = append(keys, append([]byte(nil), k...))
				return len(keys) < deleteBatch(store, LayerKeyLen), nil
			})
		})
		if err != nil || len(keys) == 0 {
			return total, err
		}
		err = store.Update(ctx, func(tx kv.Txn) error {
			for _, k := range keys {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += len(keys)
	}
}

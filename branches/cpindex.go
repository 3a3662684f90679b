package branches

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// cpIndex mirrors the checkpoint records ('K' keys) in memory, by layer,
// so a fold pass counts and re-points checkpoints without decoding every
// record (a store with 10,000 checkpoints would decode all of them twice
// per folded layer). It is loaded at Open, so after a crash it agrees with
// the records again. Every transaction that writes or deletes a record
// updates it once committed; one that fails (its outcome may be unknown)
// marks it stale, and the next reader loads it again from the store.
//
// mu is a leaf: nothing else is taken while it is held (a reload reads the
// store under it, in a transaction that waits on no lock).
type cpIndex struct {
	mu      sync.Mutex
	stale   bool
	layerOf map[string]cowfs.LayerID              // record key → its layer
	at      map[cowfs.LayerID]map[string]struct{} // layer → record keys
	// decodes counts the records folds decoded (for tests).
	decodes atomic.Int64
}

// load reads every checkpoint record. Caller holds ix.mu.
func (ix *cpIndex) load(ctx context.Context, store kv.Store) error {
	layerOf := map[string]cowfs.LayerID{}
	err := store.View(ctx, func(tx kv.Txn) error {
		clear(layerOf)
		return tx.Iterate([]byte{'K'}, nil, false, func(k, v []byte) (bool, error) {
			var cp checkpointRec
			if err := jsonUnmarshal(v, &cp); err != nil {
				return false, fmt.Errorf("branches: corrupt checkpoint record %q: %w", k, err)
			}
			layerOf[string(k)] = cp.Layer
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	ix.layerOf = layerOf
	ix.at = make(map[cowfs.LayerID]map[string]struct{}, len(layerOf))
	for k, l := range layerOf {
		ix.add(k, l)
	}
	ix.stale = false
	return nil
}

// add records key k at layer l. Caller holds ix.mu.
func (ix *cpIndex) add(k string, l cowfs.LayerID) {
	if old, ok := ix.layerOf[k]; ok {
		delete(ix.at[old], k)
		if len(ix.at[old]) == 0 {
			delete(ix.at, old)
		}
	}
	ix.layerOf[k] = l
	if ix.at[l] == nil {
		ix.at[l] = map[string]struct{}{}
	}
	ix.at[l][k] = struct{}{}
}

// ready loads the index if it is stale. Caller holds ix.mu.
func (ix *cpIndex) ready(ctx context.Context, store kv.Store) error {
	if ix.stale || ix.layerOf == nil {
		return ix.load(ctx, store)
	}
	return nil
}

// committed applies the outcome of a transaction that wrote checkpoint
// records: set (key → layer) written, del deleted, moved re-pointed to
// layer to where still present (a record deleted meanwhile stays
// deleted). err is the transaction's error: on one the index goes stale.
func (ix *cpIndex) committed(err error, set map[string]cowfs.LayerID, del [][]byte, moved []string, to cowfs.LayerID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err != nil || ix.layerOf == nil {
		ix.stale = true
		return
	}
	for k, l := range set {
		ix.add(k, l)
	}
	for _, k := range del {
		if l, ok := ix.layerOf[string(k)]; ok {
			delete(ix.layerOf, string(k))
			delete(ix.at[l], string(k))
			if len(ix.at[l]) == 0 {
				delete(ix.at, l)
			}
		}
	}
	for _, k := range moved {
		if _, ok := ix.layerOf[k]; ok {
			ix.add(k, to)
		}
	}
}

// counts calls fn with every layer some checkpoint record names and how
// many do.
func (m *Manager) cpCounts(ctx context.Context, fn func(l cowfs.LayerID, n int)) error {
	ix := &m.cps
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.ready(ctx, m.cow.KV()); err != nil {
		return err
	}
	for l, ks := range ix.at {
		fn(l, len(ks))
	}
	return nil
}

// cpKeysAt returns the keys of the checkpoint records naming layer l.
func (m *Manager) cpKeysAt(ctx context.Context, l cowfs.LayerID) ([]string, error) {
	ix := &m.cps
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.ready(ctx, m.cow.KV()); err != nil {
		return nil, err
	}
	var keys []string
	for k := range ix.at[l] {
		keys = append(keys, k)
	}
	return keys, nil
}

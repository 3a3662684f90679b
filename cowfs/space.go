package cowfs

import (
	"context"

	"github.com/branchnfs/branchnfs/kv"
)

// Space accounting (branches' status and list): what a layer's keys take
// and how large each stored content is, told from the store's sizes
// without reading block contents where the store can.

// Snapshot is a long-lived read-only Txn; Discard releases it.
type Snapshot struct {
	Txn
	snap kv.Snapshot
}

// Snapshot opens a long-lived read-only transaction.
func (s *Store) Snapshot() *Snapshot {
	snap := s.kv.NewSnapshot()
	return &Snapshot{Txn: Txn{snap, s}, snap: snap}
}

// Discard releases the snapshot.
func (s *Snapshot) Discard() { s.snap.Discard() }

// SpaceUse is what Txn.Space found.
type SpaceUse struct {
	// ContentBytes is the size of all stored content.
	ContentBytes int64
	// Unreferenced is the bytes of content no reachable layer references.
	Unreferenced int64
	// Unique holds, per owner, the bytes of content that only layers that
	// owner alone reaches reference.
	Unique map[uint64]int64
	// DeadLayers counts the layers no owner reaches (with dead set), and
	// DeadKeys and DeadBytes are their keys and those keys' bytes.
	DeadLayers int
	DeadKeys   int
	DeadBytes  int64
}

// shared marks a layer or content that more than one owner reaches.
const shared = ^uint64(0)

// Space gives every layer that owners reach an owner (the one whose
// roots' stacks reach it, or shared), every content hash the owner of its
// referencing layers (or shared), and sums the content by owner with its
// size, read from the store's index and not from the values. With dead it
// also sums the layers no owner reaches. Owners are any numbers but
// ^uint64(0). It reads every block reference of the reached layers and
// every content key: the cost grows with the data stored, and memory
// holds one entry per referenced content hash.
func (t *Txn) Space(ctx context.Context, owners map[uint64][]LayerID, dead bool) (SpaceUse, error) {
	use := SpaceUse{Unique: map[uint64]int64{}}
	owner := map[LayerID]uint64{}
	walk := func(id uint64, top LayerID) error {
		for l := top; l != 0; {
			switch o, seen := owner[l]; {
			case seen && (o == id || o == shared):
				return nil // so is every layer below it
			case seen:
				owner[l] = shared
			default:
				owner[l] = id
			}
			below, err := layerBelow(t.tx, l)
			if err != nil {
				return err
			}
			l = below
		}
		return nil
	}
	for id, roots := range owners {
		for _, l := range roots {
			if err := walk(id, l); err != nil {
				return use, err
			}
		}
	}
	hashOwner := map[[32]byte]uint64{}
	for l, o := range owner {
		if err := ctx.Err(); err != nil {
			return use, err
		}
		err := t.tx.Iterate(append(layerPrefix(l), kindData), nil, false, func(_, v []byte) (bool, error) {
			refHashes(v, func(h []byte) {
				if len(h) != 32 {
					return
				}
				k := [32]byte(h)
				if prev, ok := hashOwner[k]; !ok {
					hashOwner[k] = o
				} else if prev != o {
					hashOwner[k] = shared
				}
			})
			return true, nil
		})
		if err != nil {
			return use, err
		}
	}
	err := t.s.contentSizes(ctx, t.tx, func(h []byte, size int64) (bool, error) {
		use.ContentBytes += size
		o, ok := hashOwner[[32]byte(h)]
		switch {
		case len(h) != 32:
		case !ok:
			use.Unreferenced += size
		case o != shared:
			use.Unique[o] += size
		}
		return true, nil
	})
	if err != nil || !dead {
		return use, err
	}
	var gone []LayerID
	err = eachLayer(t.tx, true, func(l, _ LayerID) (bool, error) {
		if _, ok := owner[l]; !ok {
			gone = append(gone, l)
		}
		return true, nil
	})
	if err != nil {
		return use, err
	}
	for _, l := range gone {
		keys, bytes, err := layerSize(t.tx, l)
		if err != nil {
			return use, err
		}
		use.DeadLayers++
		use.DeadKeys += keys
		use.DeadBytes += bytes
	}
	return use, nil
}

// layerSize returns how many keys layer l holds (inodes, entries, block
// references, its record) and their bytes, keys and values: what deleting
// the layer removes, not counting the content its references use.
func layerSize(tx kv.Txn, l LayerID) (keys int, bytes int64, err error) {
	err = kv.IterateSizes(tx, layerPrefix(l), func(k []byte, size int64) (bool, error) {
		keys++
		bytes += int64(len(k)) + size
		return true, nil
	})
	if err != nil {
		return 0, 0, err
	}
	if ok, err := tx.Has(layerKey(l)); err != nil {
		return 0, 0, err
	} else if ok {
		keys++
		bytes += int64(len(layerKey(l))) + 8
	}
	return keys, bytes, nil
}

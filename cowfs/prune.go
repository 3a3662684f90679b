package cowfs

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/branchnfs/branchnfs/kv"
)

// PruneShadowed deletes the block references of layer y that layer x,
// right above it, hides: y's references (of a block or of an extent) of
// an inode each of whose blocks x holds (in a reference or an extent of
// its own) or lies at or beyond the Cut of x's record of the inode (every
// block under x's tombstone); a block straddling the Cut stays, and so
// does an extent only part of which x hides. It returns how many block
// references it deleted (an extent counts for its blocks), after which the
// block sweep can delete content only they used.
//
// The caller guarantees that every reader of y reads it through x: y has
// no referrer but x and is no top, checkpoint or fork base (as for
// FoldDown), so nothing can give it another referrer. x may be the top of
// a branch: x hides a block of y for good, because x's blocks are dropped
// only with a Cut lowered below them, a Cut never rises and a record
// leaves x only for an inode no layer below holds. Each step re-reads in
// its transaction what of x it relies on, so a concurrent write to x
// conflicts with it and it retries.
func (s *Store) PruneShadowed(ctx context.Context, x, y LayerID) (int, error) {
	store, bs := s.kv, uint64(s.opts.BlockSize)
	pruned := 0
	scan := append(layerPrefix(x), kindInode)
	var start []byte
	for {
		var inos []InodeID
		err := store.View(ctx, func(tx kv.Txn) error {
			inos = inos[:0]
			return tx.Iterate(scan, start, true, func(k, _ []byte) (bool, error) {
				inos = append(inos, InodeID(binary.BigEndian.Uint64(k[len(k)-8:])))
				return len(inos) < 512, nil
			})
		})
		if err != nil || len(inos) == 0 {
			return pruned, err
		}
		for _, ino := range inos {
			n, err := pruneInode(ctx, store, x, y, ino, bs)
			pruned += n
			if err != nil {
				return pruned, err
			}
		}
		start = u64(append([]byte(nil), scan...), uint64(inos[len(inos)-1])+1)
	}
}

// pruneInode is PruneShadowed for one inode, in transactions of at most
// 1024 of y's references, fewer when the store's Limits say so: each
// costs a read, a read of x's keys over its blocks and a delete (and an
// extent's key a read of its reference).
func pruneInode(ctx context.Context, store kv.Store, x, y LayerID, ino InodeID, bs uint64) (int, error) {
	lim := store.Limits()
	per := min(1024, max(1, (lim.Reads-2)/4), lim.Batch(1, 3*(LayerKeyLen+lim.OpBytes)))
	pruned := 0
	from := uint64(0)
	for {
		var n int
		var next uint64
		done := false
		err := store.Update(ctx, func(tx kv.Txn) error {
			n, next, done = 0, 0, false
			v, err := tx.Get(inodeKey(x, ino))
			if errors.Is(err, kv.ErrNotFound) {
				done = true // gone from x: it hid nothing below
				return nil
			}
			if err != nil {
				return err
			}
			xn, err := decodeInode(ino, v)
			if err != nil {
				return err
			}
			cut := xn.Cut
			if xn.Deleted {
				cut = 0
			}
			hidden := (cut + bs - 1) / bs // blocks from here on lie beyond the Cut
			// y's references of the batch, each with the blocks it holds.
			type yref struct {
				key         []byte
				first, last uint64
			}
			var ys []yref
			seen := 0
			err = tx.Iterate(dataPrefix(y, ino), dataKey(y, ino, from), true, func(k, _ []byte) (bool, error) {
				idx := keyBlock(k)
				next = idx + 1
				seen++
				r := yref{key: append([]byte(nil), k...), first: idx, last: idx}
				if isExtentKey(k) {
					v, err := tx.Get(k)
					if err != nil {
						return false, err
					}
					e, err := decodeExtent(idx, v, bs)
					if err != nil {
						return false, err
					}
					r.first = e.first
				}
				ys = append(ys, r)
				return seen < per, nil
			})
			if err != nil {
				return err
			}
			// The blocks x holds (references and extents) over the
			// batch's blocks below hidden, as sorted disjoint ranges: at
			// most per of x's keys (a read each, as y's).
			type span struct{ first, last uint64 }
			var xs []span
			if len(ys) > 0 && ys[0].first < hidden {
				lo, hi := ys[0].first, min(ys[len(ys)-1].last, hidden-1)
				xn := 0
				err = tx.Iterate(dataPrefix(x, ino), dataKey(x, ino, lo), true, func(k, _ []byte) (bool, error) {
					if xn++; xn > per {
						return false, nil
					}
					sp := span{keyBlock(k), keyBlock(k)}
					if isExtentKey(k) {
						v, err := tx.Get(k)
						if err != nil {
							return false, err
						}
						e, err := decodeExtent(sp.last, v, bs)
						if err != nil {
							return false, err
						}
						sp.first = e.first
					}
					if sp.first > hi {
						return false, nil
					}
					xs = append(xs, sp)
					return true, nil
				})
				if err != nil {
					return err
				}
			}
			// A reference goes if x hides each of its blocks: beyond the
			// Cut, or held by x.
			var drop [][]byte
			blocks := 0
			j := 0
			for _, r := range ys {
				hid := true
				for b := r.first; b <= r.last && b < hidden && hid; {
					for j < len(xs) && xs[j].last < b {
						j++
					}
					if j == len(xs) || xs[j].first > b {
						hid = false
						break
					}
					b = xs[j].last + 1
				}
				if hid {
					drop = append(drop, r.key)
					blocks += int(r.last - r.first + 1)
				}
			}
			done = seen < per
			for _, k := range drop {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
			n = blocks
			return nil
		})
		if err != nil {
			return pruned, err
		}
		pruned += n
		if done {
			return pruned, nil
		}
		from = next
	}
}

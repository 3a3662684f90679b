package cowfs

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/branchnfs/branchnfs/kv"
)

// FoldDown copies frozen layer x into the layer y right below it, so that
// x can then be dropped from every stack (the caller re-points whatever
// referenced x to y and lets the reclaimer delete x). y must have no
// referrer but x: nobody reads y except through x, and x's records already
// shadow y's, so readers see the same tree during and after the copy.
//
// x's records override y's; an inode record of x hides y's data beyond its
// Cut (y's blocks there are dropped, a straddling block trimmed), and the
// folded record's Cut is the smaller of both. Whiteouts over a bottom layer
// become plain deletions, unless a record follows them on a probe chain.
func (s *Store) FoldDown(ctx context.Context, x, y LayerID) error {
	f := s.View([]LayerID{x, y})
	defer f.Close()
	var yBelow LayerID
	if err := f.store.View(ctx, func(tx kv.Txn) error {
		var err error
		yBelow, err = layerBelow(tx, y)
		return err
	}); err != nil {
		return err
	}
	// Inode records first: folding one drops y's blocks it hides, which
	// must happen before x's own blocks land in y.
	for _, kind := range []byte{kindInode, kindEntry, kindData, kindSilly} {
		if err := f.foldKind(ctx, x, y, yBelow, kind); err != nil {
			return err
		}
	}
	return nil
}

// foldBatch bounds the keys one fold transaction copies whatever the
// store allows, which bounds the memory of a batch.
const foldBatch = 512

func (f *View) foldKind(ctx context.Context, x, y, yBelow LayerID, kind byte) error {
	pfx := layerPrefix(x)
	scan := append(layerPrefix(x), kind)
	lim := f.store.Limits()
	var start []byte
	for {
		type kvp struct{ k, v []byte }
		var batch []kvp
		err := f.store.View(ctx, func(tx kv.Txn) error {
			batch = batch[:0]
			return tx.Iterate(scan, start, false, func(k, v []byte) (bool, error) {
				batch = append(batch, kvp{append([]byte(nil), k...), append([]byte(nil), v...)})
				return len(batch) < foldBatch, nil
			})
		})
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		if kind == kindInode {
			// y's blocks the records of x hide go first, in batches of
			// their own: a record may hide any number of them.
			for _, e := range batch {
				ino := InodeID(binary.BigEndian.Uint64(e.k[len(pfx)+1:]))
				if err := f.dropHidden(ctx, y, ino, e.v); err != nil {
					return err
				}
			}
		}
		// Each key costs at most: an inode record, 4 reads (y's record,
		// the range of y's blocks at its cut, the block straddling it and
		// its content) and 3 writes (the trimmed block, its reference and
		// the record); an entry, 2 reads and a write; anything else a
		// write.
		cost := func(e kvp) (writes, reads, bytes int) {
			kb := len(e.k) + lim.OpBytes
			switch e.k[len(pfx)] {
			case kindInode:
				// And the extent straddling its cut: a read and two
				// writes.
				return 5, 5, 8*kb + 2*len(e.v) + int(f.bs) + 64 + 8<<10
			case kindEntry:
				return 1, 2, 3*kb + len(e.v)
			case kindData:
				if isExtentKey(e.k) && len(e.v) >= 5 {
					// foldExtent: a read and a write per block.
					n := int(binary.BigEndian.Uint32(e.v[1:5]))
					return n, n, n * (kb + 256)
				}
			}
			return 1, 0, kb + len(e.v)
		}
		done := 0
		err = f.updateRefs(ctx, []LayerID{x, y}, func(ktx kv.Txn, refs *refLog) error {
			tx := &countTxn{Txn: ktx, opBytes: lim.OpBytes}
			done = 0
			for _, e := range batch {
				if w, r, b := cost(e); done > 0 && !tx.fits(lim, w, r, b) {
					break
				}
				done++
				rest := e.k[len(pfx):]
				yk := append(layerPrefix(y), rest...)
				switch {
				case len(rest) == 9 && rest[0] == kindInode:
					ino := InodeID(binary.BigEndian.Uint64(rest[1:]))
					if err := f.foldInode(tx, ino, e.v, y, refs); err != nil {
						return err
					}
				case len(rest) == 17 && rest[0] == kindEntry:
					if yBelow == 0 && len(e.v) >= 8 && binary.BigEndian.Uint64(e.v) == 0 {
						// Nothing below y for the whiteout to hide, but
						// it may still link a probe chain: drop it only
						// if no record follows it.
						drop, err := chainEnds(tx, x, y, rest)
						if err != nil {
							return err
						}
						if drop {
							if err := tx.Delete(yk); err != nil && !errors.Is(err, kv.ErrNotFound) {
								return err
							}
							continue
						}
					}
					if err := tx.Set(yk, e.v); err != nil {
						return err
					}
				case len(rest) == 17 && rest[0] == kindData:
					// x's block replaces y's, and any extent of y's
					// covering it is split.
					ino, idx := InodeID(binary.BigEndian.Uint64(rest[1:])), binary.BigEndian.Uint64(rest[9:])
					if err := f.splitExtents(tx, y, ino, idx, idx, false, refs); err != nil {
						return err
					}
					if err := refs.set(tx, yk, e.v); err != nil {
						return err
					}
				case len(rest) == 18 && rest[0] == kindData:
					if err := f.foldExtent(tx, x, y, e.k, e.v, refs); err != nil {
						return err
					}
				default:
					if err := tx.Set(yk, e.v); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		start = append(batch[done-1].k, 0)
	}
}

// dropHidden deletes the blocks of ino in y that x's record of it
// (encoded xv) hides, but the one straddling its cut (foldInode trims
// that one), in batches the store takes. Nobody reads y but through x,
// whose record hides them already.
func (f *View) dropHidden(ctx context.Context, y LayerID, ino InodeID, xv []byte) error {
	xn, err := decodeInode(ino, xv)
	if err != nil {
		return err
	}
	cut := xn.Cut
	if xn.Deleted {
		cut = 0
	}
	first := cut / f.bs
	n := deleteBatch(f.store, LayerKeyLen)
	for {
		var keys [][]byte
		err := f.store.View(ctx, func(tx kv.Txn) error {
			keys = keys[:0]
			if ok, err := tx.Has(inodeKey(y, ino)); err != nil || !ok {
				return err // foldInode deletes nothing of y then
			}
			return tx.Iterate(dataPrefix(y, ino), dataKey(y, ino, first), true, func(k, _ []byte) (bool, error) {
				if keyBlock(k) == first && cut%f.bs != 0 {
					return true, nil
				}
				if isExtentKey(k) {
					// One straddling the cut is foldInode's to cut.
					v, err := tx.Get(k)
					if err != nil {
						return false, err
					}
					e, err := decodeExtent(keyBlock(k), v, f.bs)
					if err != nil {
						return false, err
					}
					if e.first < first || (e.first == first && cut%f.bs != 0) {
						return true, nil
					}
				}
				keys = append(keys, append([]byte(nil), k...))
				return len(keys) < n, nil
			})
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		err = f.store.Update(ctx, func(tx kv.Txn) error {
			for _, k := range keys {
				if err := tx.Delete(k); err != nil && !errors.Is(err, kv.ErrNotFound) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
}

// chainEnds reports whether neither x nor y holds a record in the slot
// after the entry key rest (kindEntry, dir, slot) names: a whiteout there
// ends its probe chain and can go.
func chainEnds(tx kv.Txn, x, y LayerID, rest []byte) (bool, error) {
	dir := InodeID(binary.BigEndian.Uint64(rest[1:]))
	next := binary.BigEndian.Uint64(rest[9:]) + 1
	for _, l := range []LayerID{x, y} {
		_, err := tx.Get(entryKey(l, dir, next))
		switch {
		case err == nil:
			return false, nil
		case !errors.Is(err, kv.ErrNotFound):
			return false, err
		}
	}
	return true, nil
}

// foldInode writes x's record of ino (encoded v) into y, dropping y's data
// that x's record hides.
func (f *View) foldInode(tx kv.Txn, ino InodeID, v []byte, y LayerID, refs *refLog) error {
	xn, err := decodeInode(ino, v)
	if err != nil {
		return err
	}
	yv, err := tx.Get(inodeKey(y, ino))
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return tx.Set(inodeKey(y, ino), v)
	case err != nil:
		return err
	}
	yn, err := decodeInode(ino, yv)
	if err != nil {
		return err
	}
	cut := xn.Cut
	if xn.Deleted {
		cut = 0
	}
	// y's own blocks at or beyond cut are hidden by x: drop or trim them.
	first := cut / f.bs
	from := first // blocks from here on go
	if cut%f.bs != 0 {
		from++
	}
	if err := f.cutExtentsFrom(tx, y, ino, from, refs); err != nil {
		return err
	}
	if from > first {
		// The straddling block, if the last of an extent, gets its own
		// reference, to trim.
		if err := f.splitExtents(tx, y, ino, first, first, true, refs); err != nil {
			return err
		}
	}
	var keys [][]byte
	err = tx.Iterate(dataPrefix(y, ino), dataKey(y, ino, first), true, func(k, _ []byte) (bool, error) {
		if keyBlock(k) >= from {
			keys = append(keys, append([]byte(nil), k...))
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := tx.Delete(k); err != nil {
			return err
		}
	}
	var trim []byte
	if from > first {
		switch v, err := tx.Get(dataKey(y, ino, first)); {
		case err == nil:
			trim = v
		case !errors.Is(err, kv.ErrNotFound):
			return err
		}
	}
	if trim != nil {
		br := &blockReader{f: f, tx: tx, ino: ino}
		buf := make([]byte, f.bs)
		if err := br.content(resolved{ref: trim, limit: cut % f.bs}, buf); err != nil {
			return err
		}
		ref, err := f.storeBlock(tx, buf[:cut%f.bs])
		if err != nil {
			return err
		}
		if err := refs.set(tx, dataKey(y, ino, first), ref); err != nil {
			return err
		}
	}
	if !xn.Deleted && yn.Cut < xn.Cut && !yn.Deleted {
		xn.Cut = yn.Cut
	}
	if yn.Deleted && !xn.Deleted {
		xn.Cut = 0
	}
	return tx.Set(inodeKey(y, ino), xn.encode())
}

// foldExtent copies the extent of layer x under key k (reference v) into
// y, where it replaces y's references of the blocks it covers (x holds no
// other reference of them: extents and block references of a layer never
// overlap).
func (f *View) foldExtent(tx kv.Txn, x, y LayerID, k, v []byte, refs *refLog) error {
	ino := InodeID(binary.BigEndian.Uint64(k[10:18]))
	e, err := decodeExtent(keyBlock(k), v, f.bs)
	if err != nil {
		return err
	}
	if err := f.splitExtents(tx, y, ino, e.first, e.last, false, refs); err != nil {
		return err
	}
	var keys [][]byte
	err = tx.Iterate(dataPrefix(y, ino), dataKey(y, ino, e.first), true, func(k, _ []byte) (bool, error) {
		if keyBlock(k) > e.last {
			return false, nil
		}
		keys = append(keys, append([]byte(nil), k...))
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := tx.Delete(k); err != nil {
			return err
		}
	}
	return refs.set(tx, append(layerPrefix(y), k[9:]...), v)
}

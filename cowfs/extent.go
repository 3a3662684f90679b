package cowfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/branchnfs/branchnfs/kv"
)

// Extents. A run of consecutive chunk-referenced blocks of one inode in
// one layer can be stored as one extent reference instead of one chunk
// reference per block: the slices of the whole run, under an extent key
// (the data key of the run's last block, plus extentMark), so that a READ
// of 1 MiB seeks to one key instead of iterating 32. Block i of an extent
// of n blocks ending at block last is bytes [(i-first)*bs, (i-first+1)*bs)
// of the slices' concatenation (first = last-n+1); every block but the
// last is whole, the last holds at least a byte.
//
// Within a layer, extents and block references never overlap: a block is
// named by its own reference, by one extent, or by nothing. A read then
// seeks to the first key at or after its first block and takes keys in
// order until one names a block beyond its last, as with block
// references alone. What writes a block reference into a layer first
// splits the extents there that cover the block (splitExtents), what
// deletes references from a block on first cuts the extent straddling it
// (cutExtentsFrom).
const (
	extentMark = 'x'
	// maxExtentBlocks bounds the blocks of one extent (a reader looks
	// this far past a block at most).
	maxExtentBlocks = 256
	// maxExtentSlices bounds the slices of one extent, so that its
	// reference (5 + 40 bytes a slice) stays under 1 KiB, well below the
	// size from which Badger (kv's default ValueThreshold, 8 KiB) moves a
	// value out of its tree into the value log: there an extent would cost a second read,
	// and the old one, once replaced, would stay on disk until its whole
	// value-log file is rewritten. 24 slices hold about 24 chunks: about
	// 1 MiB.
	maxExtentSlices = 24
)

// extentKey is the key of the extent of inode ino in layer l whose last
// block is last.
func extentKey(l LayerID, ino InodeID, last uint64) []byte {
	return append(dataKey(l, ino, last), extentMark)
}

// isExtentKey reports whether k (a key under a dataPrefix) is an extent
// key.
func isExtentKey(k []byte) bool { return len(k) == 27 && k[26] == extentMark }

// keyBlock is the block a data key names: its block, or an extent's last.
func keyBlock(k []byte) uint64 { return binary.BigEndian.Uint64(k[18:26]) }

// extent is a decoded extent reference.
type extent struct {
	first, last uint64
	slices      []byte // encoded, sliceLen each
	total       uint64 // bytes the slices make
}

// appendExtentRef appends the extent reference of n blocks made of slices.
func appendExtentRef(dst []byte, n uint32, slices []chunkSlice) []byte {
	dst = append(dst, refExtent)
	dst = binary.BigEndian.AppendUint32(dst, n)
	for _, s := range slices {
		dst = append(dst, s.h...)
		dst = binary.BigEndian.AppendUint32(dst, s.off)
		dst = binary.BigEndian.AppendUint32(dst, s.n)
	}
	return dst
}

// decodeExtent decodes the extent reference v whose key names block last;
// with block size bs it checks that every block but the last is whole.
func decodeExtent(last uint64, v []byte, bs uint64) (extent, error) {
	if len(v) < 5 || v[0] != refExtent {
		return extent{}, errCorrupt
	}
	n := uint64(binary.BigEndian.Uint32(v[1:5]))
	sl := v[5:]
	if n == 0 || n > last+1 || n > maxExtentBlocks || len(sl) == 0 || len(sl)%sliceLen != 0 {
		return extent{}, errCorrupt
	}
	e := extent{first: last - n + 1, last: last, slices: sl}
	for ; len(sl) > 0; sl = sl[sliceLen:] {
		e.total += uint64(binary.BigEndian.Uint32(sl[36:]))
	}
	if e.total <= (n-1)*bs || e.total > n*bs {
		return extent{}, errCorrupt
	}
	return e, nil
}

// blockRefs calls fn with the chunk reference of each block of e in
// [lo, hi], in order, until fn returns false. bs is the block size.
func (e extent) blockRefs(bs, lo, hi uint64, fn func(idx uint64, ref []byte) bool) error {
	lo, hi = max(lo, e.first), min(hi, e.last)
	sl := e.slices
	pos := uint64(0) // extent offset of sl's first slice
	var parts []chunkSlice
	for idx := lo; idx <= hi && idx >= lo; idx++ {
		b0 := (idx - e.first) * bs
		b1 := min(b0+bs, e.total)
		// Slices wholly before the block are done with.
		for len(sl) > 0 && pos+uint64(binary.BigEndian.Uint32(sl[36:])) <= b0 {
			pos += uint64(binary.BigEndian.Uint32(sl[36:]))
			sl = sl[sliceLen:]
		}
		parts = parts[:0]
		p, at := sl, pos
		for len(p) > 0 && at < b1 {
			off, l := uint64(binary.BigEndian.Uint32(p[32:])), uint64(binary.BigEndian.Uint32(p[36:]))
			a, b := max(at, b0), min(at+l, b1)
			parts = append(parts, chunkSlice{h: p[:32], off: uint32(off + a - at), n: uint32(b - a)})
			at += l
			p = p[sliceLen:]
		}
		if len(parts) == 0 || len(parts) > 255 {
			return errCorrupt
		}
		if !fn(idx, appendChunkRef(nil, parts, nil)) {
			return nil
		}
	}
	return nil
}

// sub returns the extent reference of e's blocks [lo, hi] (within e), and
// the block its key names (hi).
func (e extent) sub(bs, lo, hi uint64) []byte {
	a, b := (lo-e.first)*bs, min((hi-e.first+1)*bs, e.total)
	var parts []chunkSlice
	at := uint64(0)
	for sl := e.slices; len(sl) > 0 && at < b; sl = sl[sliceLen:] {
		off, l := uint64(binary.BigEndian.Uint32(sl[32:])), uint64(binary.BigEndian.Uint32(sl[36:]))
		if x, y := max(at, a), min(at+l, b); x < y {
			parts = append(parts, chunkSlice{h: sl[:32], off: uint32(off + x - at), n: uint32(y - x)})
		}
		at += l
	}
	return appendExtentRef(nil, uint32(hi-lo+1), parts)
}

// cutExtentsFrom cuts the extent of ino in layer l straddling block
// from (covering from-1 and from), if any, so that it ends at block
// from-1: the caller may then delete every reference from block from on,
// extents included.
func (f *View) cutExtentsFrom(tx kv.Txn, l LayerID, ino InodeID, from uint64, refs *refLog) error {
	if from == 0 {
		return nil
	}
	return f.splitExtents(tx, l, ino, from, from, false, refs)
}

// splitExtents replaces every extent of ino in layer l that covers a block
// in [lo, hi] by its parts outside [lo, hi] (each an extent again), and,
// with materialize, gives each of its blocks inside [lo, hi] its own
// reference. The new references use a subset of the chunks the old one
// did; they are logged (refs) all the same.
func (f *View) splitExtents(tx kv.Txn, l LayerID, ino InodeID, lo, hi uint64, materialize bool, refs *refLog) error {
	type found struct {
		key []byte
		e   extent
	}
	var exts []found
	var inner error
	err := tx.Iterate(dataPrefix(l, ino), dataKey(l, ino, lo), false, func(k, v []byte) (bool, error) {
		if !isExtentKey(k) {
			return keyBlock(k) <= hi, nil
		}
		e, err := decodeExtent(keyBlock(k), v, f.bs)
		if err != nil {
			inner = err
			return false, nil
		}
		if e.first > hi {
			return false, nil
		}
		e.slices = bytes.Clone(e.slices)
		exts = append(exts, found{bytes.Clone(k), e})
		return true, nil
	})
	if err == nil {
		err = inner
	}
	if err != nil {
		return err
	}
	for _, x := range exts {
		e := x.e
		if err := tx.Delete(x.key); err != nil {
			return err
		}
		if e.first < lo {
			if err := refs.set(tx, extentKey(l, ino, lo-1), e.sub(f.bs, e.first, lo-1)); err != nil {
				return err
			}
		}
		if e.last > hi {
			if err := refs.set(tx, x.key, e.sub(f.bs, hi+1, e.last)); err != nil {
				return err
			}
		}
		if !materialize {
			continue
		}
		err := e.blockRefs(f.bs, lo, hi, func(idx uint64, ref []byte) bool {
			inner = refs.set(tx, dataKey(l, ino, idx), ref)
			return inner == nil
		})
		if err == nil {
			err = inner
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// extentBlock is one block reference of a run coalesce may make an extent
// of.
type extentBlock struct {
	idx uint64
	ref []byte // a chunk reference without edits
	n   uint64 // its bytes
}

// joined is how many slices a run of blocks ending in prev makes with ref
// appended: ref's slices, but one if its first continues prev's last
// (the same chunk, on across the block boundary), as swapExtent joins
// them.
func joined(prev, ref []byte) int {
	sl, _, _ := chunkRefParts(ref)
	k := len(sl) / sliceLen
	if prev == nil || k == 0 {
		return k
	}
	ps, _, _ := chunkRefParts(prev)
	if len(ps) < sliceLen {
		return k
	}
	p := ps[len(ps)-sliceLen:]
	if bytes.Equal(p[:32], sl[:32]) && binary.BigEndian.Uint32(p[32:])+binary.BigEndian.Uint32(p[36:]) == binary.BigEndian.Uint32(sl[32:]) {
		k--
	}
	return k
}

// coalesce replaces, in layer l, each run of at least two consecutive
// chunk references without edits of one inode (whole blocks but the
// last) by one extent, at most maxExtentBlocks
// blocks and what one transaction of the store takes. Each transaction
// re-reads the references it replaces and skips the run if any changed,
// so a concurrent write makes it skip, and readers see the same bytes
// throughout. It returns how many extents it wrote.
func (s *Store) coalesce(ctx context.Context, l LayerID) (int, error) {
	if s.opts.LegacyNameSlots {
		return 0, nil // extentsFormat
	}
	bs := uint64(s.opts.BlockSize)
	lim := s.limits()
	// A run costs a read and a delete per block, the extent's write and
	// a few KiB of reference.
	maxRun := min(maxExtentBlocks, max(2, lim.Writes-2), max(2, lim.Reads-2),
		max(2, (lim.Bytes-(16<<10))/(2*(26+lim.OpBytes)+sliceLen*6)))
	pfx := append(layerPrefix(l), kindData)
	var start []byte
	made := 0
	for {
		var runs [][]extentBlock
		var inos []InodeID
		var next []byte
		err := s.kv.View(ctx, func(tx kv.Txn) error {
			runs, inos, next = runs[:0], inos[:0], nil
			var cur []extentBlock
			var curIno InodeID
			slices := 0 // cur's, joined
			flush := func() {
				if len(cur) >= 2 {
					runs = append(runs, cur)
					inos = append(inos, curIno)
				}
				cur = nil
			}
			scanned := 0
			defer flush()
			return tx.Iterate(pfx, start, false, func(k, v []byte) (bool, error) {
				if scanned++; scanned > 8192 {
					flush()
					next = append([]byte(nil), k...)
					return false, nil
				}
				ino := InodeID(binary.BigEndian.Uint64(k[10:18]))
				idx := keyBlock(k)
				if isExtentKey(k) {
					flush() // an extent ends a run
					return true, nil
				}
				sl, edits, ok := chunkRefParts(v)
				plain := ok && len(edits) == 0 && len(k) == 26
				var n uint64
				if plain {
					n = uint64(chunkRefBytes(v))
					plain = n > 0 && n <= bs && len(sl) > 0
				}
				if len(cur) > 0 {
					prev := cur[len(cur)-1]
					if ino != curIno || idx != prev.idx+1 || prev.n != bs || !plain || len(cur) >= maxRun ||
						slices+joined(prev.ref, v) > maxExtentSlices {
						flush()
					}
				}
				if plain {
					if len(cur) == 0 {
						slices = 0
					}
					var prev []byte
					if len(cur) > 0 {
						prev = cur[len(cur)-1].ref
					}
					slices += joined(prev, v)
					curIno = ino
					cur = append(cur, extentBlock{idx: idx, ref: append([]byte(nil), v...), n: n})
				}
				return true, nil
			})
		})
		if err != nil {
			return made, err
		}
		for i, run := range runs {
			if len(run) < 2 {
				continue
			}
			ok, err := s.swapExtent(ctx, l, inos[i], run)
			if err != nil {
				return made, err
			}
			if ok {
				made++
			}
		}
		if next == nil {
			return made, nil
		}
		start = next
	}
}

// swapExtent replaces the references of run (blocks of ino in layer l)
// by one extent, if they are all still as read; it reports whether it
// did.
func (s *Store) swapExtent(ctx context.Context, l LayerID, ino InodeID, run []extentBlock) (bool, error) {
	refs := make([][]byte, len(run))
	for i, b := range run {
		refs[i] = b.ref
	}
	ref := extentRefOf(refs)
	last := run[len(run)-1].idx
	swapped := false
	err := s.swapRefs(ctx, func(tx kv.Txn, log *refLog) error {
		swapped = false
		for _, b := range run {
			v, err := tx.Get(dataKey(l, ino, b.idx))
			if errors.Is(err, kv.ErrNotFound) {
				return nil // truncated or its layer deleted meanwhile
			}
			if err != nil {
				return err
			}
			if !bytes.Equal(v, b.ref) {
				return nil // rewritten meanwhile
			}
		}
		for _, b := range run {
			if err := tx.Delete(dataKey(l, ino, b.idx)); err != nil {
				return err
			}
		}
		if ok, err := s.extentsFormat(tx); err != nil || !ok {
			return err
		}
		swapped = true
		return log.set(tx, extentKey(l, ino, last), ref)
	})
	return swapped, err
}

// extentRefOf returns the extent reference of consecutive blocks with
// chunk references refs (without edits; each block whole but the last),
// joining the slices of a chunk that runs on across a block boundary.
func extentRefOf(refs [][]byte) []byte {
	var slices []chunkSlice
	for _, ref := range refs {
		sl, _, _ := chunkRefParts(ref)
		for ; len(sl) > 0; sl = sl[sliceLen:] {
			c := chunkSlice{h: sl[:32], off: binary.BigEndian.Uint32(sl[32:]), n: binary.BigEndian.Uint32(sl[36:])}
			if p := len(slices) - 1; p >= 0 && bytes.Equal(slices[p].h, c.h) && slices[p].off+slices[p].n == c.off {
				slices[p].n += c.n // the same chunk, on across the block boundary
				continue
			}
			slices = append(slices, c)
		}
	}
	return appendExtentRef(nil, uint32(len(refs)), slices)
}

// groupExtents splits consecutive blocks with chunk references (each
// whole but the last) into runs an extent takes (at most maxExtentSlices
// joined slices and maxExtentBlocks blocks), and calls fn with each run's
// key block and reference: an extent's for a run of two or more, the
// block's own for a run of one.
func groupExtents(blocks []chunkedBlock, fn func(last uint64, ref []byte, extent bool) error) error {
	var run [][]byte
	slices := 0
	flush := func(last uint64) error {
		defer func() { run, slices = run[:0], 0 }()
		switch len(run) {
		case 0:
			return nil
		case 1:
			return fn(last, run[0], false)
		}
		return fn(last, extentRefOf(run), true)
	}
	for i, b := range blocks {
		var prev []byte
		if len(run) > 0 {
			prev = run[len(run)-1]
		}
		k := joined(prev, b.ref)
		if len(run) > 0 && (slices+k > maxExtentSlices || len(run) >= maxExtentBlocks) {
			if err := flush(blocks[i-1].idx); err != nil {
				return err
			}
			k = joined(nil, b.ref)
		}
		run = append(run, b.ref)
		slices += k
	}
	if len(blocks) == 0 {
		return nil
	}
	return flush(blocks[len(blocks)-1].idx)
}

// extentsFormat reports whether the store may hold extents, stamping
// format 3 (names.go) in tx if it is of format 2, so that a build
// predating extents refuses the store rather than misread it. A store of
// format 1 (LegacyNameSlots, or no format record) gets no extents: the
// record would lose what says its names are hashed the old way.
func (s *Store) extentsFormat(tx kv.Txn) (bool, error) {
	if s.opts.LegacyNameSlots {
		return false, nil
	}
	if s.format3.Load() {
		return true, nil
	}
	v, err := tx.Get(formatKey)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case len(v) != 8:
		return false, fmt.Errorf("cowfs: store format record %x: %w", v, errCorrupt)
	case binary.BigEndian.Uint64(v) >= 3:
		s.format3.Store(true) // committed: it was read
		return true, nil
	}
	return true, tx.Set(formatKey, u64(nil, 3))
}

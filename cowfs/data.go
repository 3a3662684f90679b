package cowfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/internal/par"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/zeebo/blake3"
	"golang.org/x/sync/errgroup"
)

// blockReader resolves the blocks of one inode through the stack.
type blockReader struct {
	f      *View
	tx     kv.Txn
	layers []LayerID // layers holding a record of the inode, top first
	cuts   []uint64  // the record's Cut per layer; math.MaxUint64 beyond a tombstone
	ino    InodeID
	chunks chunkCache // chunks of chunk references read lately
	// fetched holds blobs prefetched for one READ (blob store only).
	fetched map[[32]byte][]byte
	// frozen, for a READ's reader (newReadBlockReader), is the cached
	// view of the frozen layers; layers then holds the top layer at most.
	frozen *frozenData
	// top, for a READ's reader, is the top layer's cache entry
	// (topcache.go); layers then holds nothing.
	top *frozenData
	gen readGen // the generation frozen and top are used under
}

func (f *View) newBlockReader(tx kv.Txn, st state, ino InodeID) (*blockReader, error) {
	layers, err := f.layersOf(tx, st, ino)
	if err != nil {
		return nil, err
	}
	br := &blockReader{f: f, tx: tx, ino: ino}
	br.layers, br.cuts, err = dataLayers(tx, layers, ino)
	if err != nil {
		return nil, err
	}
	return br, nil
}

// dataLayers returns, of layers (top first), those holding a record of
// ino with its cut (0 for a tombstone), down to the first whose cut is 0:
// nothing below it is visible.
func dataLayers(tx kv.Txn, layers []LayerID, ino InodeID) (held []LayerID, cuts []uint64, err error) {
	for _, l := range layers {
		v, err := tx.Get(inodeKey(l, ino))
		if errors.Is(err, kv.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		n, err := decodeInode(ino, v)
		if err != nil {
			return nil, nil, err
		}
		cut := n.Cut
		if n.Deleted {
			cut = 0
		}
		held, cuts = append(held, l), append(cuts, cut)
		if cut == 0 {
			break
		}
	}
	return held, cuts, nil
}

// resolved is one visible block: its reference and the byte limit (within
// the block) beyond which it reads as zeros.
type resolved struct {
	ref   []byte
	limit uint64
}

// blocks resolves blocks [first, last] to their visible references; blocks
// no layer holds (holes) are absent.
func (br *blockReader) blocks(first, last uint64) (map[uint64]resolved, error) {
	out := map[uint64]resolved{}
	err := br.resolve(first, last,
		func(idx uint64) bool { _, ok := out[idx]; return ok },
		func(idx uint64, r resolved) { r.ref = bytes.Clone(r.ref); out[idx] = r })
	return out, err
}

// blockRange is blocks for a short range (one READ): out[i] is block
// first+i, with a nil ref for a hole. The references alias the
// transaction's buffers: use them before it ends.
func (br *blockReader) blockRange(first, last uint64) ([]resolved, error) {
	if br.frozen != nil || br.top != nil {
		return br.blockRangeCached(first, last)
	}
	out := make([]resolved, last-first+1)
	err := br.resolve(first, last,
		func(idx uint64) bool { return out[idx-first].ref != nil },
		func(idx uint64, r resolved) {
			if r.ref == nil {
				r.ref = []byte{} // found but empty: content reports it corrupt
			}
			out[idx-first] = r
		})
	return out, err
}

// resolve walks the layers top down, one key iteration each over the
// block references of [first, last], and hands every visible block not
// already found (has) to put.
func (br *blockReader) resolve(first, last uint64, has func(uint64) bool, put func(uint64, resolved)) error {
	return br.resolveLayers(br.layers, br.cuts, first, last, has, put)
}

// resolveLayers is resolve through layers (top first) whose records have
// cuts.
func (br *blockReader) resolveLayers(layers []LayerID, cuts []uint64, first, last uint64, has func(uint64) bool, put func(uint64, resolved)) error {
	bs := br.f.bs
	limit := uint64(1<<64 - 1)
	for i, l := range layers {
		pfx := dataPrefix(l, br.ino)
		start := u64(append([]byte(nil), pfx...), first)
		err := br.tx.Iterate(pfx, start, false, func(k, v []byte) (bool, error) {
			if isExtentKey(k) {
				return br.resolveExtent(k, v, first, last, limit, has, put)
			}
			idx := keyBlock(k)
			if idx > last {
				return false, nil
			}
			if has(idx) {
				return true, nil // shadowed by an upper layer
			}
			base := idx * bs
			if base >= limit {
				return false, nil
			}
			lim := bs
			if limit-base < bs {
				lim = limit - base
			}
			put(idx, resolved{ref: v, limit: lim})
			return true, nil
		})
		if err != nil {
			return err
		}
		if cuts[i] < limit {
			limit = cuts[i]
		}
		if limit == 0 {
			break
		}
	}
	return nil
}

// resolveExtent is resolve for the extent under key k (reference v):
// it hands every block of it in [first, last] not already found to put,
// below limit. It reports whether resolve goes on with the layer's next
// key: not once the extent reaches beyond last, since extents of a layer
// never overlap and the next key names a later block.
func (br *blockReader) resolveExtent(k, v []byte, first, last, limit uint64, has func(uint64) bool, put func(uint64, resolved)) (bool, error) {
	bs := br.f.bs
	e, err := decodeExtent(keyBlock(k), v, bs)
	if err != nil {
		return false, err
	}
	if e.first > last {
		return false, nil
	}
	more := e.last < last
	err = e.blockRefs(bs, first, last, func(idx uint64, ref []byte) bool {
		if has(idx) {
			return true // shadowed by an upper layer, or by the block's own reference
		}
		base := idx * bs
		if base >= limit {
			more = false
			return false
		}
		put(idx, resolved{ref: ref, limit: min(bs, limit-base)})
		return true
	})
	return more, err
}

// getContent calls fn with the content of hash h (Store.getContent).
func (br *blockReader) getContent(h []byte, fn func([]byte) error) error {
	if br.f.s.blobs == nil {
		return br.tx.GetFunc(contentKey(h), fn) // the kv path, inlined
	}
	if data, ok := br.fetched[[32]byte(h)]; ok {
		return fn(data)
	}
	return br.f.s.getContent(br.f.ctx, br.tx, h, fn)
}

// readContent copies the content of hash h from byte off on into dst
// and returns how many bytes it copied: with the store's ValueReader
// (straight from its files) where it has one and the content is not in a
// blob store, through getContent otherwise.
func (br *blockReader) readContent(h []byte, off int, dst []byte) (int, error) {
	if br.f.s.blobs == nil {
		if vr, ok := br.tx.(kv.ValueReader); ok {
			return vr.ReadValue(contentKey(h), off, dst)
		}
	}
	n := 0
	err := br.getContent(h, func(v []byte) error {
		if off < len(v) {
			n = copy(dst, v[off:])
		}
		return nil
	})
	return n, err
}

// prefetch gets the blobs blocks use from the blob store, up to
// blobUploads at once, for getContent: a READ of many blocks then waits
// for about one round trip per blobUploads blocks rather than one per
// block. blocks start at block first; p is the READ's reply data, the
// file's bytes from off on. A whole block that refers to a blob no other
// block of the READ uses is read straight into p (no buffer, no copy);
// the blocks filled that way are reported in filled, for readBlocks to
// skip.
func (br *blockReader) prefetch(blocks []resolved, first uint64, p []byte, off uint64) (filled []bool, err error) {
	bs := br.f.bs
	end := off + uint64(len(p))
	uses := map[[32]byte]int{}
	for _, r := range blocks {
		refHashes(r.ref, func(h []byte) { uses[[32]byte(h)]++ })
	}
	if len(uses) < 2 {
		return nil, nil
	}
	type get struct {
		h   [32]byte
		dst []byte // nil: into a pooled buffer, kept in br.fetched
		blk int    // the block dst is, when dst is set
	}
	gets := make([]get, 0, len(uses))
	for i, r := range blocks {
		base := (first + uint64(i)) * bs
		if len(r.ref) == 33 && r.ref[0] == refHash && r.limit >= bs && base >= off && base+bs <= end && uses[[32]byte(r.ref[1:])] == 1 {
			dst := p[base-off : base-off+bs : base-off+bs]
			gets = append(gets, get{h: [32]byte(r.ref[1:]), dst: dst, blk: i})
			delete(uses, [32]byte(r.ref[1:]))
		}
	}
	for _, r := range blocks { // the rest, in the order the READ uses them
		refHashes(r.ref, func(h []byte) {
			if k := [32]byte(h); uses[k] > 0 {
				gets = append(gets, get{h: k})
				delete(uses, k)
			}
		})
	}
	out := make([][]byte, len(gets))
	filled = make([]bool, len(blocks))
	fl, _ := br.f.s.blobs.(blobs.Filler)
	g, ctx := errgroup.WithContext(br.f.ctx)
	g.SetLimit(blobUploads)
	for i, x := range gets {
		g.Go(func() error {
			var data []byte
			var err error
			switch {
			case fl != nil && x.dst != nil:
				data, err = fl.GetInto(ctx, blobs.Key(x.h), x.dst[:0])
			case fl != nil:
				data, err = fl.GetInto(ctx, blobs.Key(x.h), getBlobBuf(int(br.f.bs)))
			default:
				data, err = br.f.s.blobs.Get(ctx, blobs.Key(x.h))
			}
			if errors.Is(err, blobs.ErrNotFound) {
				return nil // getContent reports it
			}
			if err != nil {
				return err
			}
			if x.dst == nil {
				out[i] = data
				return nil
			}
			// Straight into the reply: the blob's bytes, zeros after.
			if len(data) > 0 && &data[0] != &x.dst[0] {
				copy(x.dst, data) // not read into dst (fetched on a miss)
			}
			clear(x.dst[min(len(data), len(x.dst)):])
			filled[x.blk] = true
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		for _, b := range out {
			putBlobBuf(b, int(br.f.bs))
		}
		return nil, fmt.Errorf("cowfs: reading block content from the blob store: %w", err)
	}
	br.fetched = make(map[[32]byte][]byte, len(gets))
	for i, x := range gets {
		if out[i] != nil {
			br.fetched[x.h] = out[i]
		}
	}
	return filled, nil
}

// blobBufs holds buffers of a block's size for prefetch, which reads
// cached blobs into them (blobs.Filler) and gives them back once the READ
// has copied them into its reply (releaseFetched): a READ of 32 blocks
// then allocates and clears no 1 MiB of buffers.
var blobBufs sync.Pool // of *[]byte

// getBlobBuf returns a buffer with room for bs bytes.
func getBlobBuf(bs int) []byte {
	if p, ok := blobBufs.Get().(*[]byte); ok && cap(*p) >= bs {
		return (*p)[:0]
	}
	return make([]byte, 0, bs)
}

// putBlobBuf gives b back to blobBufs if it is a block-sized buffer
// nobody uses any more.
func putBlobBuf(b []byte, bs int) {
	if cap(b) == bs {
		b = b[:0]
		blobBufs.Put(&b)
	}
}

// releaseFetched gives the buffers of the prefetched blobs back: getContent
// callers keep none of them.
func (br *blockReader) releaseFetched() {
	for h, b := range br.fetched {
		putBlobBuf(b, int(br.f.bs))
		delete(br.fetched, h)
	}
}

// content fills dst (bs bytes) with the bytes of a block reference,
// zero-extended to bs and zeroed beyond limit. Stored content is copied
// straight into dst and only the rest is cleared: dst is a READ reply's
// data, written once.
func (br *blockReader) content(r resolved, dst []byte) error {
	var data []byte
	switch {
	case len(r.ref) == 0:
		return errCorrupt
	case r.ref[0] == refZero:
		clear(dst)
		return nil
	case r.ref[0] == refInline:
		data = r.ref[1:]
	case r.ref[0] == refHash && len(r.ref) == 33:
		return br.storedRange(r, 0, dst)
	case r.ref[0] == refPatch && len(r.ref) >= 33:
		// The base may be shorter than the block (the file grew past it
		// later): edits land in the zero-filled rest of dst.
		n, err := br.readContent(r.ref[1:33], 0, dst)
		clear(dst[n:])
		if err != nil {
			return err
		}
		if err := applyPatches(dst, r.ref[33:]); err != nil {
			return err
		}
		if r.limit < uint64(len(dst)) {
			clear(dst[r.limit:])
		}
		return nil
	case r.ref[0] == refChunks:
		if err := br.chunkContent(r.ref, dst); err != nil {
			return err
		}
		if r.limit < uint64(len(dst)) {
			clear(dst[r.limit:])
		}
		return nil
	default:
		return errCorrupt
	}
	if uint64(len(data)) > r.limit {
		data = data[:r.limit]
	}
	n := copy(dst, data)
	clear(dst[n:])
	return nil
}

func (f *View) readAt(ino InodeID, p []byte, off int64) (int, bool, error) {
	if off < 0 {
		return 0, false, pathErr("read", "", syscall.EINVAL)
	}
	return f.readInto(ino, uint64(off), len(p), func(_ *Attr, n int) ([]byte, error) { return p[:n], nil })
}

// readInto is ReadInto: one snapshot reads the inode, calls buf with its
// attributes and the count clamped to its size, and reads the data into
// the buffer buf returns.
func (f *View) readInto(ino InodeID, off uint64, count int, buf func(a *Attr, n int) ([]byte, error)) (int, bool, error) {
	if count < 0 {
		return 0, false, pathErr("read", "", syscall.EINVAL)
	}
	var n int
	var eof bool
	rg := f.readGen() // before the READ's snapshot
	tg := f.topGen(rg)
	read := func(tx kv.Txn, st state) error {
		// The top layer's record: cached (topcache.go), or read with its
		// references for the READ's range in one request (prefetchRead).
		top := st.stack[0]
		td := f.topEntry(top, ino, tg)
		var rec *inode // the top layer's record; nil: it holds none
		if td == nil {
			first, last := off/f.bs, (off+uint64(max(count, 1))-1)/f.bs
			if err := prefetchRead(tx, top, ino, first, last, true, tg.ok); err != nil {
				return err
			}
			r, err := layerInode(tx, top, ino)
			if err != nil {
				return err
			}
			rec = r
			if tg.ok {
				td = f.fillTop(top, ino, rec, tg)
			}
		} else if rec = td.rec; rec != nil && rec.Size > off {
			first, last := off/f.bs, (off+min(uint64(max(count, 1)), rec.Size-off)-1)/f.bs
			if !f.hasGroups(td, first, last) {
				if err := prefetchRead(tx, top, ino, first, last, false, true); err != nil {
					return err
				}
			}
		}
		nd, l, _, err := f.inodeOver(tx, st, ino, rec, false) // f.known, keeping the layer
		if errors.Is(err, syscall.ENOENT) {
			return syscall.ESTALE
		}
		if err != nil {
			return err
		}
		n, eof = 0, false
		size := nd.Size
		end := size
		if off < size {
			end = off + min(uint64(count), size-off)
		}
		eof = end >= size
		a := nd.attr()
		p, err := buf(&a, int(end-min(off, end)))
		if err != nil {
			return err
		}
		if err := dataOnly(nd.Type); err != nil {
			return err
		}
		if off >= end {
			return nil
		}
		if len(p) < int(end-off) {
			return fmt.Errorf("cowfs: read buffer of %d bytes for %d: %w", len(p), end-off, syscall.EINVAL)
		}
		var topRec *inode // the top layer's record; nil: it holds none
		if l == top {
			topRec = nd
		}
		br, err := f.newReadBlockReader(tx, st, ino, topRec, rg, td)
		if err != nil {
			return err
		}
		defer br.release()
		defer br.releaseFetched()
		first, last := off/f.bs, (end-1)/f.bs
		br.chunks.keep = last > first
		blocks, err := br.blockRange(first, last)
		if err != nil {
			return err
		}
		var filled []bool // blocks prefetch read straight into p
		if f.s.blobs != nil && last > first {
			if filled, err = br.prefetch(blocks, first, p[:end-off], off); err != nil {
				return err
			}
		}
		if err := br.readBlocks(blocks, first, p[:end-off], off, filled); err != nil {
			return err
		}
		n = int(end - off)
		return nil
	}
	err := f.view(read)
	if err != nil && rg.ok && errors.Is(err, kv.ErrNotFound) {
		// A cached reference may name content that a rechunk or coalesce
		// (the same bytes under other references; on this server or
		// another over the same store) replaced and a sweep then deleted
		// (refs.go, swapRefs). Drop the caches and read again, filling
		// them from what the store holds now.
		f.dropCache()
		f.s.frozen.drop()
		rg = f.readGen()
		tg = f.topGen(rg)
		err = f.view(read)
	}
	return n, eof, f.wrap("read", "", err)
}

// readBlocks fills p, the file's bytes from off on, from blocks (block
// first on), but for those filled marks (nil: none), which hold their
// bytes already. Chunk references without edits are read chunk by chunk
// (fillPieces): each chunk once, its slices copied straight into p.
func (br *blockReader) readBlocks(blocks []resolved, first uint64, p []byte, off uint64, filled []bool) error {
	bs := br.f.bs
	end := off + uint64(len(p))
	var pieces []piece // allocated on demand
	var buf []byte     // scratch for partial blocks, allocated on demand
	var whole []fill   // whole stored blocks, for fillWhole; nil: filled in line
	if len(blocks) >= parallelBlocks && br.concurrent() {
		whole = make([]fill, 0, len(blocks))
	}
	for i, r := range blocks {
		if filled != nil && filled[i] {
			continue
		}
		base := (first + uint64(i)) * bs
		lo, hi := max(base, off), min(base+bs, end)
		dst := p[lo-off : hi-off]
		if r.ref == nil {
			clear(dst)
			continue
		}
		if pieces == nil && len(r.ref) > 0 && r.ref[0] == refChunks {
			pieces = make([]piece, 0, 2*len(blocks)+2)
		}
		if ok, err := addPieces(&pieces, r, dst, lo-base, hi-base, bs); err != nil {
			return err
		} else if ok {
			continue
		}
		if lo == base && hi == base+bs {
			// A whole block: fill the caller's buffer directly.
			if whole != nil && len(r.ref) > 0 && (r.ref[0] == refHash || r.ref[0] == refPatch) {
				whole = append(whole, fill{r, dst})
				continue
			}
			if err := br.content(r, dst); err != nil {
				return err
			}
			continue
		}
		if len(r.ref) == 33 && r.ref[0] == refHash {
			// Part of a stored block (a small file's only block, the
			// last of a larger one): read that part straight into p.
			if err := br.storedRange(r, lo-base, dst); err != nil {
				return err
			}
			continue
		}
		if buf == nil {
			sp := getScratch(int(bs))
			defer scratch.Put(sp) // once: buf is set from here on
			buf = *sp
		}
		if err := br.contentRange(r, buf, lo-base, hi-base); err != nil {
			return err
		}
		copy(dst, buf[lo-base:hi-base])
	}
	if err := br.fillWhole(whole); err != nil {
		return err
	}
	return br.fillPieces(pieces)
}

// storedRange fills dst with the bytes of the stored block r (a plain
// hash reference) from offset at on: what the block holds below r.limit,
// zeros past it or past the stored value's end.
func (br *blockReader) storedRange(r resolved, at uint64, dst []byte) error {
	n := 0
	if at < r.limit {
		var err error
		if n, err = br.readContent(r.ref[1:], int(at), dst[:min(uint64(len(dst)), r.limit-at)]); err != nil {
			return err
		}
	}
	clear(dst[n:])
	return nil
}

// scratch holds *[]byte buffers of a block for readBlocks' partial
// blocks, which contentRange fills whole (content) or in the part read.
var scratch sync.Pool

func getScratch(n int) *[]byte {
	if p, _ := scratch.Get().(*[]byte); p != nil && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n)
	return &b
}

// parallelBlocks is the fewest blocks a READ fetches on two goroutines
// (fillWhole): below it the goroutine costs more than it saves.
const parallelBlocks = 4

// fill is a whole block for fillWhole: its reference and its bytes in
// the reply.
type fill struct {
	r   resolved
	dst []byte
}

// concurrent reports whether the blocks of one READ may be fetched on
// several goroutines: content from the store itself (no blob store) in a
// transaction that allows concurrent reads (kv.ConcurrentReader).
func (br *blockReader) concurrent() bool {
	c, ok := br.tx.(kv.ConcurrentReader)
	return ok && br.f.s.blobs == nil && c.ConcurrentGets()
}

// fillWhole fills the whole stored blocks of fs (content: stored hashes
// and patches, which read the store and nothing of br's). Plain stored
// blocks are read with one kv.ValueReader batch, in the order the values
// lie in the store's files. The rest (patches; every block where the transaction is no
// ValueReader) are read in two halves, the first on a goroutine of its
// own: a READ is one request, served in order on its connection, and
// halving the time its store reads take halves most of the server's share
// of its latency, on a core that would wait meanwhile. A panic on the
// goroutine is raised again here, where the request's recovery handles it.
func (br *blockReader) fillWhole(fs []fill) error {
	vr, _ := br.tx.(kv.ValueReader)
	var rs []kv.ValueRead // stored blocks, read in one batch
	var dsts [][]byte
	var rest []fill
	var keys []byte // the batch's keys, one allocation for all
	for _, x := range fs {
		if vr != nil && br.f.s.blobs == nil && x.r.ref[0] == refHash && len(x.r.ref) == 33 {
			if rs == nil {
				rs = make([]kv.ValueRead, 0, len(fs))
				dsts = make([][]byte, 0, len(fs))
				keys = make([]byte, 0, 33*len(fs))
			}
			at := len(keys)
			keys = append(append(keys, pfxContent), x.r.ref[1:]...)
			rs = append(rs, kv.ValueRead{Key: keys[at:len(keys):len(keys)], Dst: x.dst[:min(x.r.limit, uint64(len(x.dst)))], Fixed: true})
			dsts = append(dsts, x.dst)
			continue
		}
		rest = append(rest, x)
	}
	if err := br.fillContent(rest); err != nil {
		return err
	}
	if len(rs) == 0 {
		return nil
	}
	if err := vr.ReadValues(rs); err != nil {
		return err
	}
	for i, r := range rs {
		clear(dsts[i][r.N:])
	}
	return nil
}

// fillContent fills the blocks of fs with br.content, in two halves on
// two goroutines (fillWhole) when there are several.
func (br *blockReader) fillContent(fs []fill) error {
	serial := func(fs []fill) error {
		for _, x := range fs {
			if err := br.content(x.r, x.dst); err != nil {
				return err
			}
		}
		return nil
	}
	if len(fs) < 2 {
		return serial(fs)
	}
	h := len(fs) / 2
	return par.Two(func() error { return serial(fs[:h]) }, func() error { return serial(fs[h:]) })
}

// applyPatches applies the edits of a patch reference to data in place.
func applyPatches(data, p []byte) error {
	for len(p) > 0 {
		if len(p) < 8 {
			return errCorrupt
		}
		off, n := binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])
		p = p[8:]
		if uint64(len(p)) < uint64(n) || uint64(off)+uint64(n) > uint64(len(data)) {
			return errCorrupt
		}
		copy(data[off:], p[:n])
		p = p[n:]
	}
	return nil
}

// patchRef returns a patch reference that applies edit at off over the
// block old refers to, if old is content-addressed (a stored block, a
// patch, or chunk slices, which then carry the edits), fully visible, and
// the edits stay small; nil otherwise.
func (f *View) patchRef(old resolved, off uint64, edit []byte) []byte {
	if old.limit != f.bs || len(old.ref) < 2 {
		return nil
	}
	if old.ref[0] == refChunks {
		sl, prev, ok := chunkRefParts(old.ref)
		if !ok || len(prev)+8+len(edit) > maxPatchBytes {
			return nil
		}
		ref := make([]byte, 0, len(old.ref)+8+len(edit))
		ref = append(ref, old.ref[:2+len(sl)+len(prev)]...)
		ref = binary.BigEndian.AppendUint32(ref, uint32(off))
		ref = binary.BigEndian.AppendUint32(ref, uint32(len(edit)))
		return append(ref, edit...)
	}
	if len(old.ref) < 33 {
		return nil
	}
	var prev []byte
	switch old.ref[0] {
	case refHash:
		if len(old.ref) != 33 {
			return nil
		}
	case refPatch:
		prev = old.ref[33:]
	default:
		return nil
	}
	if len(prev)+8+len(edit) > maxPatchBytes {
		return nil
	}
	ref := make([]byte, 0, 33+len(prev)+8+len(edit))
	ref = append(ref, refPatch)
	ref = append(ref, old.ref[1:33]...)
	ref = append(ref, prev...)
	ref = binary.BigEndian.AppendUint32(ref, uint32(off))
	ref = binary.BigEndian.AppendUint32(ref, uint32(len(edit)))
	return append(ref, edit...)
}

// blockRef returns the reference of data and, for content-addressed
// blocks, the content key-value to store; it writes nothing.
func (f *View) blockRef(data []byte) ([]byte, *[2][]byte) {
	allZero := true
	for _, b := range data {
		if b != 0 {
			allZero = false
			break
		}
	}
	switch {
	case allZero:
		return []byte{refZero}, nil
	case len(data) <= f.opts.InlineMax:
		return append([]byte{refInline}, data...), nil
	}
	sum := blake3.Sum256(data)
	// The content aliases data: callers either store it at once (Set
	// copies) or pass data they own.
	return append([]byte{refHash}, sum[:]...), &[2][]byte{contentKey(sum[:]), data}
}

// storeBlock stores data (the block's bytes up to the file end) unless the
// store has it already, and returns its reference, for refLog.set.
func (f *View) storeBlock(tx kv.Txn, data []byte) ([]byte, error) {
	ref, c := f.blockRef(data)
	if c == nil {
		return ref, nil
	}
	if _, err := f.s.putContent(f.ctx, tx, c[0][1:], c[1]); err != nil {
		return nil, err
	}
	return ref, nil
}

func usedFor(size uint64) uint64 { return (size + 4095) &^ 4095 }

func (f *View) writeAt(ino InodeID, p []byte, off int64, o WriteOptions) (Attr, error) {
	if off < 0 {
		return Attr{}, pathErr("write", "", syscall.EINVAL)
	}
	end := uint64(off) + uint64(len(p))
	if end > f.opts.MaxFileSize || end < uint64(off) {
		return Attr{}, pathErr("write", "", syscall.EFBIG)
	}
	return f.updateFile(ino, func(tx kv.Txn, st state, refs *refLog, n *inode) error {
		if len(p) == 0 {
			return nil
		}
		newSize := max(n.Size, end)
		if err := f.writeBlocks(tx, st, n, p, uint64(off), newSize, refs); err != nil {
			return err
		}
		n.Size = newSize
		n.Used = usedFor(newSize)
		if o.KillSetID {
			n.Mode = killSetID(n.Mode)
		}
		return nil
	})
}

// updateFile runs fn for a write of data into the regular file ino, under
// the inode's data lock, in one transaction that logs the block references
// it writes: fn changes n, the record copied up into the top layer, which
// is then stored with new mtime and ctime. It returns the new attributes.
//
// A file a truncate left leftover blocks of (inode.Stale) has them purged
// first: the write may grow the file over them.
func (f *View) updateFile(ino InodeID, fn func(tx kv.Txn, st state, refs *refLog, n *inode) error) (Attr, error) {
	f.finishStale()
	mu := &f.dataMu[uint64(ino)%uint64(len(f.dataMu))]
	mu.Lock()
	defer mu.Unlock()
	var out Attr
	err := f.purgingStale(ino, func(stale *bool) error {
		return f.updateData("write", "", func(tx kv.Txn, st state, refs *refLog) error {
			n, err := f.inodeForWrite(tx, st, ino)
			if err != nil {
				return err
			}
			if err := dataOnly(n.Type); err != nil {
				return err
			}
			if *stale = n.Stale; n.Stale {
				return errStale
			}
			if err := fn(tx, st, refs, n); err != nil {
				return err
			}
			ts := now()
			n.Mtime, n.Ctime = ts, ts
			out = n.attr()
			return f.put(tx, st, n)
		})
	})
	return out, err
}

// errStale ends a transaction that found its file marked inode.Stale;
// purgingStale purges the leftovers and runs it again.
var errStale = errors.New("cowfs: the file's truncated blocks are still being purged")

// purgingStale runs op, which sets *stale and fails when it finds ino
// marked Stale; then it purges ino's leftover blocks (purgeStale) and
// runs op again. The caller holds ino's dataMu stripe, so nothing marks
// ino again in between.
func (f *View) purgingStale(ino InodeID, op func(stale *bool) error) error {
	for try := 0; ; try++ {
		stale := false
		err := op(&stale)
		if !stale || try == 2 {
			return err
		}
		if err := f.purgeStale(ino); err != nil {
			return err
		}
	}
}

// purgeStale deletes the block references of ino a truncate left in the
// top layer past its new size (inode.Stale), in as many transactions as
// the store's limits need, and clears the mark with the last. Reads never
// look past the size, so nothing reads them meanwhile; the caller holds
// ino's dataMu stripe, so nothing writes there either. No extent straddles
// StaleFrom: the truncate cut the one that did and deleted the first key
// past it, and a rechunk joins only consecutive blocks.
func (f *View) purgeStale(ino InodeID) error {
	for {
		done := false
		err := f.updateData("setattr", "", func(tx kv.Txn, st state, _ *refLog) error {
			done = false
			top := st.stack[0]
			v, err := tx.Get(inodeKey(top, ino))
			if errors.Is(err, kv.ErrNotFound) {
				done = true
				return tx.Delete(staleKey(top, ino)) // removed since
			}
			if err != nil {
				return err
			}
			n, err := decodeInode(ino, v)
			if err != nil {
				return err
			}
			if !n.Stale {
				done = true
				return tx.Delete(staleKey(top, ino))
			}
			more, err := f.dropOwnData(tx, st, ino, n.StaleFrom, dataDeletesInTxn(f.s.limits(), len(st.stack)))
			if err != nil || more {
				return err
			}
			done = true
			n.Stale, n.StaleFrom = false, 0
			if err := tx.Delete(staleKey(top, ino)); err != nil {
				return err
			}
			return f.put(tx, st, n)
		})
		if err != nil || done {
			return err
		}
	}
}

// finishStale purges, once per top layer, the leftovers of the truncates
// a crash (or a failed purge) interrupted there, which the layer's stale
// index names. Its failure fails no write: a later write of the file
// purges them, and the layer's reclaim deletes them otherwise.
func (f *View) finishStale() {
	f.mu.RLock()
	top := f.stack[0]
	f.mu.RUnlock()
	if f.opts.ReadOnly || f.staleTop.Load() == uint64(top) {
		return
	}
	var inos []InodeID
	err := f.view(func(tx kv.Txn, st state) error {
		inos, top = inos[:0], st.stack[0]
		pfx := stalePrefix(top)
		return tx.Iterate(pfx, nil, true, func(k, _ []byte) (bool, error) {
			inos = append(inos, InodeID(binary.BigEndian.Uint64(k[len(pfx):])))
			return true, nil
		})
	})
	for _, ino := range inos {
		if err != nil {
			break
		}
		mu := &f.dataMu[uint64(ino)%uint64(len(f.dataMu))]
		mu.Lock()
		err = f.purgeStale(ino)
		mu.Unlock()
	}
	if err != nil {
		f.opts.Logger.Warn("cowfs: the leftover blocks of interrupted truncates stay until their files are written again", "layer", top, "err", err)
		return
	}
	f.staleTop.Store(uint64(top))
}

// writeBlocks copies p at off into the top layer's blocks of n.
func (f *View) writeBlocks(tx kv.Txn, st state, n *inode, p []byte, off, newSize uint64, refs *refLog) error {
	bs := f.bs
	end := off + uint64(len(p))
	first, last := off/bs, (end-1)/bs
	// The blocks written get references of their own: extents of the
	// top layer covering them are split.
	if err := f.splitExtents(tx, st.stack[0], n.Ino, first, last, true, refs); err != nil {
		return err
	}
	var br *blockReader
	var old map[uint64]resolved
	var buf []byte  // scratch for partial blocks, allocated on demand
	var up []upload // with a blob store: the blocks to upload, then reference
	for idx := first; idx <= last; idx++ {
		base := idx * bs
		blen := min(bs, newSize-base) // bytes of this block inside the file
		lo, hi := max(base, off), min(base+bs, end)
		full := lo == base && hi >= base+blen
		var data []byte
		if full {
			data = p[lo-off : lo-off+blen] // no copy: storeBlock's Set copies
		} else {
			if buf == nil {
				buf = make([]byte, bs)
			}
			data = buf[:blen]
			if br == nil {
				var err error
				if br, err = f.newBlockReader(tx, st, n.Ino); err != nil {
					return err
				}
				// Only the first and last blocks can be partial.
				if old, err = br.blocks(first, last); err != nil {
					return err
				}
			}
			r, ok := old[idx]
			if ok && n.Size >= base+blen {
				// The block keeps its length: a small edit of a stored
				// block becomes a patch reference.
				if ref := f.patchRef(r, lo-base, p[lo-off:hi-off]); ref != nil {
					if err := refs.set(tx, dataKey(st.stack[0], n.Ino, idx), ref); err != nil {
						return err
					}
					continue
				}
			}
			if ok {
				if err := br.content(r, buf); err != nil {
					return err
				}
			} else {
				clear(buf)
			}
			// Bytes beyond the old size are zeros, whatever the block held.
			if n.Size < base+bs {
				if n.Size > base {
					clear(buf[n.Size-base:])
				} else {
					clear(buf)
				}
			}
			copy(buf[lo-base:], p[lo-off:hi-off])
		}
		if f.s.blobs != nil {
			// Uploaded together below.
			ref, c := f.blockRef(data)
			if c != nil && !full {
				c[1] = bytes.Clone(c[1]) // buf is reused for the last block
			}
			up = append(up, upload{idx, ref, c})
			continue
		}
		ref, err := f.storeBlock(tx, data)
		if err != nil {
			return err
		}
		if err := refs.set(tx, dataKey(st.stack[0], n.Ino, idx), ref); err != nil {
			return err
		}
	}
	if len(up) == 0 {
		return nil
	}
	var cs [][2][]byte
	for _, u := range up {
		if u.c != nil {
			cs = append(cs, *u.c)
		}
	}
	if err := f.s.putContents(f.ctx, tx, cs); err != nil {
		return err
	}
	for _, u := range up {
		if err := refs.set(tx, dataKey(st.stack[0], n.Ino, u.idx), u.ref); err != nil {
			return err
		}
	}
	return nil
}

// upload is a block writeBlocks stores in a blob store: its index, its
// reference and its content key-value (nil for zeros and inline blocks).
type upload struct {
	idx uint64
	ref []byte
	c   *[2][]byte
}

func (f *View) setAttr(ino InodeID, sa SetAttr) (Attr, error) {
	_, post, err := f.setAttrChecked(ino, sa.Size != nil, func(Attr) (SetAttr, error) { return sa, nil })
	return post, err
}

// setAttrChecked is SetAttrChecked; truncate says whether check may set a
// size (the view's leftovers of earlier truncates are purged first).
func (f *View) setAttrChecked(ino InodeID, truncate bool, check func(cur Attr) (SetAttr, error)) (pre, post Attr, err error) {
	if truncate {
		f.finishStale()
	}
	mu := &f.dataMu[uint64(ino)%uint64(len(f.dataMu))]
	mu.Lock()
	defer mu.Unlock()
	purge := false // the truncate left blocks for purgeStale
	err = f.purgingStale(ino, func(stale *bool) error {
		return f.updateData("setattr", "", func(tx kv.Txn, st state, refs *refLog) error {
			purge = false
			n, err := f.inodeForWrite(tx, st, ino)
			if err != nil {
				return err
			}
			pre = n.attr()
			sa, err := check(pre)
			if err != nil {
				return err
			}
			if sa.Size != nil && *sa.Size > f.opts.MaxFileSize {
				return syscall.EFBIG
			}
			if *stale = n.Stale && sa.Size != nil; *stale {
				return errStale
			}
			if err := f.setAttrTx(tx, st, n, sa, refs); err != nil {
				return err
			}
			purge = n.Stale
			post = n.attr()
			return f.put(tx, st, n)
		})
	})
	if err == nil && purge {
		// The new size committed; the blocks past it go now. Should
		// this fail, the next write of the file or the view's next
		// first write (finishStale) purges them.
		if perr := f.purgeStale(ino); perr != nil {
			f.opts.Logger.Warn("cowfs: the blocks a truncate cut stay until the file is written again", "inode", ino, "err", perr)
		}
	}
	return pre, post, err
}

// setAttrTx applies sa to n, the record copied up into the top layer.
func (f *View) setAttrTx(tx kv.Txn, st state, n *inode, sa SetAttr, refs *refLog) error {
	ts := now()
	if sa.Mode != nil {
		n.Mode = *sa.Mode & ModePerm
	}
	if sa.UID != nil {
		n.UID = *sa.UID
	}
	if sa.GID != nil {
		n.GID = *sa.GID
	}
	if sa.Atime != nil {
		n.Atime = sa.Atime.UnixNano()
	}
	if sa.Mtime != nil {
		n.Mtime = sa.Mtime.UnixNano()
	}
	if sa.Size != nil {
		if err := dataOnly(n.Type); err != nil {
			return err
		}
		if err := f.truncate(tx, st, n, *sa.Size, refs); err != nil {
			return err
		}
		if sa.KillSetID && sa.Mode == nil {
			n.Mode = killSetID(n.Mode)
		}
		if sa.Mtime == nil {
			n.Mtime = ts
		}
	}
	n.Ctime = ts
	return nil
}

// truncate changes n's size in the top layer. Shrinking drops the top
// layer's blocks beyond the end (or marks those the transaction cannot
// hold Stale), trims its partial last block, and lowers Cut so inherited
// data beyond the end stays hidden if the file grows again. n is not
// Stale already (setAttr purges first).
func (f *View) truncate(tx kv.Txn, st state, n *inode, size uint64, refs *refLog) error {
	if size >= n.Size {
		n.Size = size
		n.Used = usedFor(size)
		return nil
	}
	bs := f.bs
	keep := (size + bs - 1) / bs // blocks [0, keep) stay
	if err := f.cutExtentsFrom(tx, st.stack[0], n.Ino, keep, refs); err != nil {
		return err
	}
	// The blocks past the new end: as many as the transaction holds go
	// now, the rest once the new size committed (purgeStale), marked
	// Stale until then so no write grows the file over them.
	if more, err := f.dropOwnData(tx, st, n.Ino, keep, dataDeletesInTxn(f.s.limits(), len(st.stack))); err != nil {
		return err
	} else if more && !n.Stale {
		n.Stale, n.StaleFrom = true, keep
		if err := tx.Set(staleKey(st.stack[0], n.Ino), []byte{}); err != nil {
			return err
		}
	}
	if size%bs != 0 {
		idx := size / bs
		// The last block of an extent gets its own reference, to trim.
		if err := f.splitExtents(tx, st.stack[0], n.Ino, idx, idx, true, refs); err != nil {
			return err
		}
		v, err := tx.Get(dataKey(st.stack[0], n.Ino, idx))
		if err == nil {
			br := &blockReader{f: f, tx: tx, ino: n.Ino}
			buf := make([]byte, bs)
			if err := br.content(resolved{ref: v, limit: bs}, buf); err != nil {
				return err
			}
			ref, err := f.storeBlock(tx, buf[:size-idx*bs])
			if err != nil {
				return err
			}
			if err := refs.set(tx, dataKey(st.stack[0], n.Ino, idx), ref); err != nil {
				return err
			}
		} else if !errors.Is(err, kv.ErrNotFound) {
			return err
		}
	}
	n.Size = size
	n.Used = usedFor(size)
	if size < n.Cut {
		n.Cut = size
	}
	return nil
}

// dataOnly is the error of a data operation (read, write, truncate) on
// an inode of type t: nil for a regular file.
func dataOnly(t FileType) error {
	switch t {
	case TypeRegular:
		return nil
	case TypeDir:
		return syscall.EISDIR
	}
	return syscall.EINVAL
}

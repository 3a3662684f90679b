package cowfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/restic/chunker"
	"github.com/zeebo/blake3"
)

// Content-defined chunking. Writes land as fixed-size blocks (cheap random
// writes); Rechunk later runs a rolling-hash chunker (restic's Rabin
// chunker) over each run of consecutive plain-hash blocks a layer holds
// for an inode, stores the chunks as content (deduplicated by hash like
// blocks) and swaps each block's reference for a chunk reference (tag
// refChunks: the slices of the chunks that make up the block). Chunk
// boundaries depend on the bytes around them, not on offsets, so data
// shifted by an insertion cuts into the same chunks again and is stored
// once. The block map stays as it is, so layering, Cut, copy-up, merge,
// fold and prune keep working per block index; then runs of chunk
// references become extents (extent.go), one reference per run.

// Chunk sizes. A chunk ends where the rolling hash of the last 64 bytes has
// its low chunkAvgBits bits zero, between chunkMin and chunkMax bytes: about
// 40 KiB on average. Measured with BenchmarkChunkSizes (a 32 MiB file and a
// copy with 10 bytes prepended, 32 KiB blocks): what the copy adds is its
// block references plus the one chunk that differs, 0.12 MiB at this size
// against 0.21 MiB with twice the sizes (fewer slices per reference, but a
// bigger differing chunk) and 0.23 MiB with four times; smaller chunks also
// make a small READ fetch less. A block then uses at most five slices
// (a reference of at most 202 bytes; 75 on average); one in a file's
// first 64 KiB, cut into head chunks (below), about 12 and at most 33.
const (
	chunkMin     = 8 << 10
	chunkMax     = 128 << 10
	chunkAvgBits = 15
	// chunkPol is the chunker's irreducible polynomial. It is part of the
	// store format: a different one cuts different chunks, and shifted data
	// would no longer meet the chunks stored before.
	chunkPol = chunker.Pol(0x3DA3358B4DC173)
	// sliceLen is the encoded size of one slice: hash, offset, length.
	sliceLen = 32 + 4 + 4
	// rechunkBatch is how many blocks one rechunk transaction swaps at
	// most (fewer if the store's Limits say so: see swap in rechunkRun).
	rechunkBatch = 64
	// rechunkMaxRun bounds the blocks chunked as one stream (and held in
	// memory with their references): a longer run is chunked in pieces.
	// The chunker restarts at each piece, which costs about one chunk of
	// sharing per piece: boundaries fall back in step after one chunk.
	rechunkMaxRun = 8192
)

// chunkSizes are the chunker's bounds and average bits, a variable only
// so that BenchmarkChunkSizes can compare others.
var chunkSizes = struct{ min, max, avgBits int }{chunkMin, chunkMax, chunkAvgBits}

// A file's head is cut into smaller chunks: inserts are most common there
// (a prepended line, an edited header), and an insert stores anew the
// chunk it falls in. The chunks starting in a file's first headBytes bytes
// are cut with headMin, headMax and headAvgBits (about 3 KiB on average);
// the normal chunker then starts at the end of the last of them, a
// content-defined point, so after an insert it meets the same bytes and
// cuts the same chunks as before. Measured with BenchmarkHeadChunkSizes: a
// copy of an imported 32 MiB file with 10 bytes prepended adds one chunk
// of 3.0 KiB on average and 4.9 KiB at most over five files, against 56
// and 184 KiB without head chunking (the first one or two chunks, of
// 8-128 KiB each), for one more key per 32 MiB file (38.4 against 37.4);
// over 1,000 files with 10 bytes inserted in their first 64 KiB, 3.1% of
// the copies have two new chunks (the insert made or removed a boundary,
// or fell in a chunk cut at headMax, which then moves) and 0.1% exceed
// 0.0256 MiB. Bounds of 2-16 KiB (about 6 KiB) cut half as many chunks
// but miss that 1% of the time, 1-8 KiB cut at the bound more often. A
// file of two blocks holds about 20 chunks instead of one or two. This
// changes only how new bytes are cut: chunks cut before stay valid
// references, and nothing derives boundaries from stored chunks (Rechunk
// takes plain hash and inline references only).
const (
	headBytes   = 64 << 10
	headMin     = 1 << 10
	headMax     = 16 << 10
	headAvgBits = 11
)

// headFileMin: a file shorter than this is cut with the normal bounds
// alone. Head chunks cost keys (a file of 64 KiB or more holds about 20
// more chunks; with blocks in S3, each is an object and a GET on a cold
// read), which a 1 MiB file's 25 normal chunks can carry and a 40 KiB
// file's one or two cannot; and an insert into a small file stores
// anew at most the file's size. The chunker knows the size it reads: a
// rechunk run that starts in a file's head but ends before headFileMin
// (a run of a few new blocks) is cut as a small file's. A variable only
// so that BenchmarkHeadChunkSizes can measure small files.
var headFileMin int64 = 1 << 20

// headSizes are the head chunker's bounds, a variable only so that
// BenchmarkHeadChunkSizes can compare others (bytes 0: no head chunking).
var headSizes = struct{ bytes, min, max, avgBits int }{headBytes, headMin, headMax, headAvgBits}

// fileChunker cuts a stream of a file's bytes into content-defined
// chunks: those starting before the file's offset headSizes.bytes with
// the head bounds, the rest with chunkSizes. Rechunk and WriteChunked
// both cut through it, so an import and a rechunk of the same bytes at
// the same file offset cut the same chunks.
type fileChunker struct {
	rd      io.Reader
	base    int64 // the file offset of the stream's first byte
	ch      *chunker.Chunker
	headEnd int64 // stream offset from which chunks are normal ones
	small   bool  // cutting head chunks
	off     int64 // stream offset of ch's first byte
	head    []byte
}

// newChunker returns the chunker that cuts rd, the bytes of a file from
// its offset base on, into content-defined chunks.
func newChunker(rd io.Reader, base int64) *fileChunker {
	c := &fileChunker{rd: rd, base: base}
	if h := int64(headSizes.bytes); base < h {
		c.headEnd, c.small = h-base, true
		return c
	}
	c.ch = chunker.NewWithBoundaries(rd, chunkPol, uint(chunkSizes.min), uint(chunkSizes.max))
	c.ch.SetAverageBits(chunkSizes.avgBits)
	return c
}

// Next returns the next chunk, its Start the stream offset, its Data in
// buf (which must hold max(chunkSizes.max, headSizes.max) bytes); io.EOF
// after the last.
func (c *fileChunker) Next(buf []byte) (chunker.Chunk, error) {
	if c.small && c.ch == nil {
		// Every head chunk starts before headEnd and ends within
		// headSizes.max bytes, so it lies in the first headEnd+max
		// bytes: read them, cut them, go on with the rest after them.
		// Read up to headFileMin too, to know a small file.
		c.head = make([]byte, max(c.headEnd+int64(headSizes.max), headFileMin-c.base))
		n, err := io.ReadFull(c.rd, c.head)
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			c.head = c.head[:n]
		default:
			return chunker.Chunk{}, err
		}
		if c.base+int64(n) < headFileMin {
			// A small file (the stream ended): normal chunks only.
			c.small = false
			c.ch = chunker.NewWithBoundaries(bytes.NewReader(c.head), chunkPol, uint(chunkSizes.min), uint(chunkSizes.max))
			c.ch.SetAverageBits(chunkSizes.avgBits)
			c.head = nil
		} else {
			c.ch = chunker.NewWithBoundaries(bytes.NewReader(c.head), chunkPol, uint(headSizes.min), uint(headSizes.max))
			c.ch.SetAverageBits(headSizes.avgBits)
		}
	}
	k, err := c.ch.Next(buf)
	if err != nil {
		return k, err
	}
	k.Start += uint(c.off)
	if end := int64(k.Start + k.Length); c.small && end >= c.headEnd {
		// The last head chunk: the normal chunker starts where it ends,
		// on the rest of the bytes read and then on the stream.
		c.small = false
		c.off = end
		c.ch.ResetWithBoundaries(io.MultiReader(bytes.NewReader(c.head[end:]), c.rd), chunkPol, uint(chunkSizes.min), uint(chunkSizes.max))
		c.ch.SetAverageBits(chunkSizes.avgBits)
		c.head = nil
	}
	return k, nil
}

// chunkBufSize is the buffer Next needs.
func chunkBufSize() int { return max(chunkSizes.max, headSizes.max) }

// chunkSlice is bytes [off, off+n) of the chunk with hash h.
type chunkSlice struct {
	h      []byte
	off, n uint32
}

// appendChunkRef appends the chunk reference of slices plus edits to dst.
func appendChunkRef(dst []byte, slices []chunkSlice, edits []byte) []byte {
	dst = append(dst, refChunks, byte(len(slices)))
	for _, s := range slices {
		dst = append(dst, s.h...)
		dst = binary.BigEndian.AppendUint32(dst, s.off)
		dst = binary.BigEndian.AppendUint32(dst, s.n)
	}
	return append(dst, edits...)
}

// chunkRefParts splits a chunk reference into its encoded slices and its
// edits.
func chunkRefParts(ref []byte) (slices, edits []byte, ok bool) {
	if len(ref) < 2 || ref[0] != refChunks || ref[1] == 0 {
		return nil, nil, false
	}
	end := 2 + int(ref[1])*sliceLen
	if len(ref) < end {
		return nil, nil, false
	}
	return ref[2:end], ref[end:], true
}

// refHashes calls fn with every content hash block reference ref uses:
// one for a stored block or a patch, one per slice for a chunk or extent
// reference.
// Every sweep mark and every write log goes through it, so a reference
// kind it missed would let the sweep delete live content.
func refHashes(ref []byte, fn func(h []byte)) {
	switch {
	case len(ref) >= 33 && (ref[0] == refHash || ref[0] == refPatch):
		fn(ref[1:33])
	case len(ref) >= 2 && ref[0] == refChunks:
		sl, _, ok := chunkRefParts(ref)
		if !ok {
			// Corrupt: still name whatever hashes it holds.
			sl = ref[2:]
		}
		for ; len(sl) >= 32; sl = sl[min(sliceLen, len(sl)):] {
			fn(sl[:32])
		}
	case len(ref) >= 5 && ref[0] == refExtent:
		for sl := ref[5:]; len(sl) >= 32; sl = sl[min(sliceLen, len(sl)):] {
			fn(sl[:32])
		}
	}
}

// chunkCache keeps the last few chunks one blockReader fetched, so a READ
// spanning several blocks fetches each chunk once: the blocks of a
// rechunked run use consecutive chunks, each by a few consecutive blocks.
// A READ within one block (keep unset) caches nothing: it copies just the
// bytes it needs out of the chunks they lie in.
type chunkCache struct {
	ents [4]struct {
		h    [32]byte
		data []byte // from chunkBufs
		ok   bool
	}
	next    int
	keep    bool // cache what is fetched (a READ of several blocks)
	fetches int  // store reads, for tests
}

// chunkBufs recycles the chunk caches' buffers across READs.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, chunkMax); return &b }}

// release gives the chunk cache's buffers back; br must not read after.
func (br *blockReader) release() {
	for i := range br.chunks.ents {
		if e := &br.chunks.ents[i]; e.data != nil {
			b := e.data[:0]
			chunkBufs.Put(&b)
			e.data, e.ok = nil, false
		}
	}
}

// cached returns chunk h if the cache holds it.
func (br *blockReader) cached(h []byte) ([]byte, bool) {
	for i := range br.chunks.ents {
		if e := &br.chunks.ents[i]; e.ok && bytes.Equal(e.h[:], h) {
			return e.data, true
		}
	}
	return nil, false
}

// chunk returns the content of chunk h, valid until the next call.
func (br *blockReader) chunk(h []byte) ([]byte, error) {
	c := &br.chunks
	if data, ok := br.cached(h); ok {
		return data, nil
	}
	e := &c.ents[c.next]
	c.next = (c.next + 1) % len(c.ents)
	e.ok = false
	if e.data == nil {
		e.data = *chunkBufs.Get().(*[]byte)
	}
	c.fetches++
	err := br.getContent(h, func(v []byte) error {
		e.data = append(e.data[:0], v...)
		return nil
	})
	if err != nil {
		if errors.Is(err, kv.ErrNotFound) {
			return nil, fmt.Errorf("cowfs: chunk %x of a block is missing: %w", h[:8], errCorrupt)
		}
		return nil, err
	}
	copy(e.h[:], h)
	e.ok = true
	return e.data, nil
}

// chunkContent fills dst (a whole block) with the bytes of chunk reference
// ref, zero-extended, with its edits applied.
func (br *blockReader) chunkContent(ref, dst []byte) error {
	sl, edits, ok := chunkRefParts(ref)
	if !ok {
		return errCorrupt
	}
	n := 0
	for ; len(sl) > 0; sl = sl[sliceLen:] {
		off, l := binary.BigEndian.Uint32(sl[32:]), binary.BigEndian.Uint32(sl[36:])
		data, err := br.chunk(sl[:32])
		if err != nil {
			return err
		}
		if uint64(off)+uint64(l) > uint64(len(data)) || n+int(l) > len(dst) {
			return errCorrupt
		}
		n += copy(dst[n:], data[off:off+l])
	}
	clear(dst[n:])
	return applyPatches(dst, edits)
}

// contentRange is content for a READ that needs only bytes [lo, hi) of
// the block: for a chunk reference it reads only the chunks those bytes lie
// in (through the cache if the READ spans more blocks). Bytes of dst
// outside [lo, hi) are then unspecified.
func (br *blockReader) contentRange(r resolved, dst []byte, lo, hi uint64) error {
	if len(r.ref) == 0 || r.ref[0] != refChunks {
		return br.content(r, dst)
	}
	sl, edits, ok := chunkRefParts(r.ref)
	if !ok {
		return errCorrupt
	}
	n := uint64(0) // block offset of the slice
	for ; len(sl) > 0; sl = sl[sliceLen:] {
		off, l := uint64(binary.BigEndian.Uint32(sl[32:])), uint64(binary.BigEndian.Uint32(sl[36:]))
		if n+l > uint64(len(dst)) {
			return errCorrupt
		}
		if a, b := max(n, lo), min(n+l, hi); a < b {
			from := func(v []byte) error {
				if off+l > uint64(len(v)) {
					return errCorrupt
				}
				copy(dst[a:b], v[off+a-n:off+b-n])
				return nil
			}
			if data, ok := br.cached(sl[:32]); ok || br.chunks.keep {
				if !ok {
					var err error
					if data, err = br.chunk(sl[:32]); err != nil {
						return err
					}
				}
				if err := from(data); err != nil {
					return err
				}
			} else {
				br.chunks.fetches++
				err := br.getContent(sl[:32], from)
				if errors.Is(err, kv.ErrNotFound) {
					return fmt.Errorf("cowfs: chunk %x of a block is missing: %w", sl[:8], errCorrupt)
				}
				if err != nil {
					return err
				}
			}
		}
		n += l
	}
	if n < hi {
		clear(dst[max(n, lo):hi])
	}
	if err := applyPatches(dst, edits); err != nil {
		return err
	}
	if r.limit < hi {
		clear(dst[max(r.limit, lo):hi])
	}
	return nil
}

// piece is bytes [off, off+n) of chunk h, to copy into dst (len n).
type piece struct {
	h      []byte
	off, n uint64
	dst    []byte
}

// addPieces appends to pieces what reading bytes [lo, hi) of the block r
// resolves to takes, into dst (hi-lo bytes), and clears the bytes of dst
// no slice covers (beyond the slices or beyond r.limit), if r is a chunk
// reference without edits; it reports whether it did. bs is the block
// size.
func addPieces(pieces *[]piece, r resolved, dst []byte, lo, hi, bs uint64) (bool, error) {
	if len(r.ref) == 0 || r.ref[0] != refChunks {
		return false, nil
	}
	sl, edits, ok := chunkRefParts(r.ref)
	if !ok {
		return false, errCorrupt
	}
	if len(edits) > 0 {
		return false, nil
	}
	stop := min(hi, r.limit) // bytes from here on read as zeros
	n := uint64(0)           // block offset of the slice
	for ; len(sl) > 0; sl = sl[sliceLen:] {
		off, l := uint64(binary.BigEndian.Uint32(sl[32:])), uint64(binary.BigEndian.Uint32(sl[36:]))
		if n+l > bs {
			return false, errCorrupt
		}
		if a, b := max(n, lo), min(n+l, stop); a < b {
			*pieces = append(*pieces, piece{h: sl[:32], off: off + a - n, n: b - a, dst: dst[a-lo : b-lo]})
		}
		n += l
	}
	if z := max(lo, min(n, stop)); z < hi {
		clear(dst[z-lo:])
	}
	return true, nil
}

// fillPieces copies the pieces, reading each run of pieces of one chunk
// with one store read: the blocks of a rechunked run use consecutive
// chunks, so a READ reads each chunk once.
func (br *blockReader) fillPieces(pieces []piece) error {
	for i := 0; i < len(pieces); {
		j := i + 1
		for j < len(pieces) && bytes.Equal(pieces[j].h, pieces[i].h) {
			j++
		}
		br.chunks.fetches++
		err := br.readPieces(pieces[i:j])
		if errors.Is(err, kv.ErrNotFound) {
			return fmt.Errorf("cowfs: chunk %x of a block is missing: %w", pieces[i].h[:8], errCorrupt)
		}
		if err != nil {
			return err
		}
		i = j
	}
	return nil
}

// readPieces copies pieces of one chunk into their places: with one read
// per run of pieces that follow each other in both the chunk and the
// reply (a READ reads its part of a chunk at once), or with one fetch of
// the whole chunk where the content is not read straight from the store's
// files.
func (br *blockReader) readPieces(pcs []piece) error {
	if _, ok := br.tx.(kv.ValueReader); !ok || br.f.s.blobs != nil {
		return br.getContent(pcs[0].h, func(v []byte) error {
			for _, pc := range pcs {
				if pc.off+pc.n > uint64(len(v)) {
					return errCorrupt
				}
				copy(pc.dst, v[pc.off:pc.off+pc.n])
			}
			return nil
		})
	}
	for i := 0; i < len(pcs); {
		off, dst := pcs[i].off, pcs[i].dst[:pcs[i].n]
		j := i + 1
		for ; j < len(pcs) && pcs[j].off == off+uint64(len(dst)) && adjacent(dst, pcs[j].dst[:pcs[j].n]); j++ {
			dst = dst[:len(dst)+int(pcs[j].n)]
		}
		n, err := br.readContent(pcs[i].h, int(off), dst)
		if err != nil {
			return err
		}
		if n < len(dst) {
			return errCorrupt // a slice past the chunk's end
		}
		i = j
	}
	return nil
}

// adjacent reports whether b starts where a ends, in a's array.
func adjacent(a, b []byte) bool {
	return len(b) > 0 && cap(a) >= len(a)+len(b) && &a[:len(a)+1][len(a)] == &b[0]
}

// chunkRefBytes is the length of the block a chunk reference makes (before
// edits, which never extend it).
func chunkRefBytes(ref []byte) int64 {
	sl, _, ok := chunkRefParts(ref)
	if !ok {
		return 0
	}
	var n int64
	for ; len(sl) > 0; sl = sl[sliceLen:] {
		n += int64(binary.BigEndian.Uint32(sl[36:]))
	}
	return n
}

// RechunkStats tells what Rechunk did.
type RechunkStats struct {
	// Blocks counts the block references swapped for chunk references.
	Blocks int `json:"blocks"`
	// Chunks counts the chunks stored (not already in the store).
	Chunks int `json:"chunks"`
	// Bytes counts the block bytes read to chunk them.
	Bytes int64 `json:"bytes"`
	// Extents counts the extents written (each in place of the chunk
	// references of a run of blocks).
	Extents int `json:"extents"`
}

// runBlock is one block of a run: its index, its reference (refHash, or
// refInline for a run's last) and,
// once read, its place in the run's byte stream.
type runBlock struct {
	idx        uint64
	ref        []byte
	start, end int64
	read       bool
}

// Rechunk replaces, in layer l, the references of runs of at least two
// consecutive plain-hash blocks of an inode (with the inline block after
// them: a file's short last block) by chunk references naming
// content-defined chunks of the run's bytes, and stops once it read about
// budget bytes (it returns how many it read). A single block is left
// alone: chunking it alone gives one chunk equal to the block.
//
// A swap changes references, never bytes: each transaction re-reads the
// references it replaces and swaps only those still equal to the ones it
// chunked, so a concurrent write, truncate, fold or layer deletion makes
// it skip the block (or retry), and every reader sees the same bytes
// throughout. l may be a branch's top layer for that reason. Chunks are
// stored in the transaction that first references them, under the
// store's tracker, so a concurrent sweep keeps them. The plain blocks
// become garbage for the sweep once nothing else names them.
func (s *Store) Rechunk(ctx context.Context, l LayerID, budget int64) (RechunkStats, error) {
	st, err := s.rechunkPlain(ctx, l, budget)
	if err != nil {
		return st, err
	}
	st.Extents, err = s.coalesce(ctx, l)
	return st, err
}

// rechunkPlain is Rechunk but for the extents.
func (s *Store) rechunkPlain(ctx context.Context, l LayerID, budget int64) (RechunkStats, error) {
	store := s.kv
	var st RechunkStats
	pfx := append(layerPrefix(l), kindData)
	var start []byte
	for st.Bytes < budget {
		var runs [][]runBlock
		var inos []InodeID
		var next []byte
		err := store.View(ctx, func(tx kv.Txn) error {
			runs, inos, next = runs[:0], inos[:0], nil
			var cur []runBlock
			var curIno InodeID
			blocks, scanned := 0, 0
			flush := func() {
				if len(cur) >= 2 {
					runs = append(runs, cur)
					inos = append(inos, curIno)
				}
				cur = nil
			}
			err := tx.Iterate(pfx, start, false, func(k, v []byte) (bool, error) {
				ino := InodeID(binary.BigEndian.Uint64(k[10:18]))
				idx := binary.BigEndian.Uint64(k[18:])
				plain := len(v) == 33 && v[0] == refHash
				// A block stored inline (a file's short last block) joins
				// the run before it: its bytes end the run's stream, so
				// the run's last chunk is the one an import of the same
				// bytes cuts, and a copy of a file shifted by a few bytes
				// shares it.
				if len(v) >= 2 && v[0] == refInline && len(cur) > 0 && ino == curIno && idx == cur[len(cur)-1].idx+1 {
					plain = true
				}
				if scanned++; len(cur) == 0 && scanned > 1<<16 {
					// A page of references none of which starts a run.
					next = append([]byte(nil), k...)
					return false, nil
				}
				if len(cur) > 0 && (ino != curIno || idx != cur[len(cur)-1].idx+1 || !plain || len(cur) >= rechunkMaxRun) {
					flush()
					// Stop between runs once the page is full.
					if blocks >= 4096 {
						next = append([]byte(nil), k...)
						return false, nil
					}
				}
				if plain {
					curIno = ino
					cur = append(cur, runBlock{idx: idx, ref: append([]byte(nil), v...)})
					blocks++
				}
				return true, nil
			})
			flush()
			return err
		})
		if err != nil {
			return st, err
		}
		for i, run := range runs {
			if st.Bytes >= budget {
				return st, nil
			}
			if err := s.rechunkRun(ctx, l, inos[i], run, &st); err != nil {
				return st, err
			}
		}
		if next == nil {
			return st, nil
		}
		start = next
	}
	return st, nil
}

// runReader reads the bytes of a run's blocks in order, fetching a few
// blocks per transaction.
type runReader struct {
	ctx   context.Context
	s     *Store
	store kv.Store
	run   []runBlock
	i     int    // next block to fetch
	buf   []byte // fetched, not yet read
	pos   int64  // stream offset of buf[0]
}

func (r *runReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.i == len(r.run) {
			return 0, io.EOF
		}
		n := min(len(r.run)-r.i, 16)
		var bufs [][]byte
		err := r.store.View(r.ctx, func(tx kv.Txn) error {
			bufs = bufs[:0]
			for _, b := range r.run[r.i : r.i+n] {
				if b.ref[0] == refInline {
					bufs = append(bufs, bytes.Clone(b.ref[1:]))
					continue
				}
				err := r.s.getContent(r.ctx, tx, b.ref[1:33], func(v []byte) error {
					bufs = append(bufs, bytes.Clone(v))
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		off := r.pos
		for j, v := range bufs {
			b := &r.run[r.i+j]
			b.start, b.end, b.read = off, off+int64(len(v)), true
			off += int64(len(v))
			r.buf = append(r.buf, v...)
		}
		r.i += n
	}
	c := copy(p, r.buf)
	r.buf = r.buf[c:]
	r.pos += int64(c)
	if len(r.buf) == 0 {
		r.buf = nil
	}
	return c, nil
}

// pendingChunk is a chunk cut from a run, kept until every block using it
// is swapped.
type pendingChunk struct {
	h          []byte
	start, end int64
	data       []byte
}

// rechunkRun chunks one run of layer l's blocks of ino and swaps their
// references, in transactions that fit the store's Limits.
func (s *Store) rechunkRun(ctx context.Context, l LayerID, ino InodeID, run []runBlock, st *RechunkStats) error {
	rd := &runReader{ctx: ctx, s: s, store: s.kv, run: run}
	ch := newChunker(rd, int64(run[0].idx)*int64(s.opts.BlockSize))
	buf := make([]byte, chunkBufSize())
	var chunks []pendingChunk
	done := 0 // blocks [0, done) are swapped (or skipped)
	ready := 0
	lim := s.limits()
	// commit swaps the references of batch (their new references in
	// refsOf) in one transaction, storing the chunks in need.
	commit := func(batch []runBlock, refsOf [][]byte, need []pendingChunk) error {
		stored, swapped := 0, 0
		err := s.swapRefs(ctx, func(tx kv.Txn, refs *refLog) error {
			stored, swapped = 0, 0
			var keys, vals [][]byte
			for i, b := range batch {
				if refsOf[i] == nil {
					continue
				}
				k := dataKey(l, ino, b.idx)
				v, err := tx.Get(k)
				if errors.Is(err, kv.ErrNotFound) {
					continue // truncated or its layer deleted meanwhile
				}
				if err != nil {
					return err
				}
				if !bytes.Equal(v, b.ref) {
					continue // rewritten meanwhile
				}
				keys, vals = append(keys, k), append(vals, refsOf[i])
			}
			if len(keys) == 0 {
				return nil
			}
			for _, c := range need {
				ok, err := s.putContent(ctx, tx, c.h, c.data)
				if err != nil {
					return err
				}
				if ok {
					stored++
				}
			}
			for i := range keys {
				if err := refs.set(tx, keys[i], vals[i]); err != nil {
					return err
				}
			}
			swapped = len(keys)
			return nil
		})
		st.Chunks += stored
		st.Blocks += swapped
		return err
	}
	// swap swaps the blocks [done, ready), in transactions that each fit
	// the store's Limits: a block costs a read and a write of its
	// reference, a chunk it is the first to need a read and a write.
	swap := func() error {
		for done < ready {
			var refsOf [][]byte
			var need []pendingChunk
			writes, reads, size := 0, 0, 0
			n := 0
			for ; done+n < ready; n++ {
				b := run[done+n]
				var slices []chunkSlice
				var add []pendingChunk
				for _, c := range chunks {
					if c.end <= b.start || c.start >= b.end {
						continue
					}
					lo, hi := max(c.start, b.start), min(c.end, b.end)
					slices = append(slices, chunkSlice{h: c.h, off: uint32(lo - c.start), n: uint32(hi - lo)})
					if (len(need) == 0 || !bytes.Equal(need[len(need)-1].h, c.h)) && (len(add) == 0 || !bytes.Equal(add[len(add)-1].h, c.h)) {
						add = append(add, c)
					}
				}
				var ref []byte
				if len(slices) <= 255 { // else (huge blocks) the block stays as it is
					ref = appendChunkRef(nil, slices, nil)
				}
				w, r := writes+1+len(add), reads+1+len(add)
				z := size + 2*(26+lim.OpBytes) + len(ref)
				for _, c := range add {
					z += 2*(33+lim.OpBytes) + len(c.data)
				}
				if n > 0 && (w > lim.Writes || r > lim.Reads || z > lim.Bytes) {
					break // the block goes into the next transaction
				}
				writes, reads, size = w, r, z
				refsOf = append(refsOf, ref)
				need = append(need, add...)
				if n+1 >= rechunkBatch {
					n++
					break
				}
			}
			if err := commit(run[done:done+n], refsOf, need); err != nil {
				return err
			}
			done += n
		}
		// Chunks wholly before the next block are no longer needed.
		if done < len(run) && run[done].read {
			keep := chunks[:0]
			for _, c := range chunks {
				if c.end > run[done].start {
					keep = append(keep, c)
				}
			}
			chunks = keep
		}
		return nil
	}
	for {
		c, err := ch.Next(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, kv.ErrNotFound) {
				return nil // a block's content went meanwhile: leave the run
			}
			return err
		}
		sum := blake3.Sum256(c.Data)
		chunks = append(chunks, pendingChunk{h: sum[:], start: int64(c.Start), end: int64(c.Start + c.Length),
			data: append([]byte(nil), c.Data...)})
		st.Bytes += int64(c.Length)
		end := int64(c.Start + c.Length)
		for ready < len(run) && run[ready].read && run[ready].end <= end {
			ready++
		}
		if ready-done >= rechunkBatch {
			if err := swap(); err != nil {
				return err
			}
		}
	}
	return swap()
}

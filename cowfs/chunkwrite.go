package cowfs

import (
	"bytes"
	"fmt"
	"io"
	"syscall"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/zeebo/blake3"
)

// Writing a whole file as content-defined chunks. An import (importdir)
// knows a file's bytes in order and in full, so it stores them as Rechunk
// would have left them: the same chunker (newChunker) cuts the stream, each
// chunk is stored once under its hash, and each block gets the chunk
// reference naming its slices, each run of blocks in a transaction one
// extent (extent.go). A fresh store then has nothing for GC to rechunk,
// and shifted copies of imported data dedupe at once.

// WriteChunked writes the bytes of r to regular file ino, which must be
// empty, as content-defined chunks, and returns the file's attributes and
// the bytes written. A file of one block or less is written as WriteAt
// would (Rechunk leaves a single block alone too: chunked alone it would
// make one chunk equal to the block). It writes in transactions of at most rechunkBatch
// blocks (fewer when the store's Limits call for it), each extending the
// file: a failure leaves the file holding a prefix of r's bytes, in whole
// blocks. The file must not be written by anything else meanwhile (it
// fails with EIO if its size changes under it). Readers see the same bytes
// as after a WriteAt of the same data.
func (f *View) WriteChunked(ino InodeID, r io.Reader) (Attr, int64, error) {
	bs := int64(f.bs)
	// Up to one block and a byte tells whether the file spans blocks.
	head := make([]byte, bs+1)
	k, err := io.ReadFull(r, head)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		a, err := f.GetAttr(ino)
		if err != nil {
			return a, 0, err
		}
		if a.Size != 0 {
			return a, 0, f.wrap("write", "", fmt.Errorf("cowfs: chunked write: the file is not empty (%d bytes)", a.Size))
		}
		if k == 0 {
			return a, 0, nil
		}
		a, err = f.WriteAt(ino, head[:k], 0)
		if err != nil {
			return a, 0, err
		}
		return a, int64(k), nil
	case err != nil:
		return Attr{}, 0, fmt.Errorf("cowfs: chunked write: %w", err)
	}
	ch := newChunker(io.MultiReader(bytes.NewReader(head), r), 0)
	buf := make([]byte, chunkBufSize())
	var chunks []pendingChunk // cut, not yet wholly written
	var attr Attr
	var written int64 // file bytes written: whole blocks, or all at the end
	var cut int64     // stream bytes cut into chunks
	eof := false
	lim := f.s.limits()
	for !eof || written < cut {
		// Cut chunks until a batch of blocks is whole, or the stream ends.
		for !eof && cut-written < rechunkBatch*bs {
			c, err := ch.Next(buf)
			if err == io.EOF {
				eof = true
				break
			}
			if err != nil {
				return attr, written, fmt.Errorf("cowfs: chunked write: %w", err)
			}
			sum := blake3.Sum256(c.Data)
			chunks = append(chunks, pendingChunk{h: sum[:], start: int64(c.Start), end: int64(c.Start + c.Length),
				data: append([]byte(nil), c.Data...)})
			cut = int64(c.Start + c.Length)
		}
		if uint64(cut) > f.opts.MaxFileSize {
			return attr, written, pathErr("write", "", syscall.EFBIG)
		}
		// The blocks [written, end) of this transaction: whole blocks, and
		// at the end of the stream the last, partial one.
		end := written + min(cut-written, rechunkBatch*bs)
		if !eof {
			end -= end % bs
		}
		if end <= written {
			continue
		}
		var blocks []chunkedBlock
		var need []pendingChunk
		writes, reads, size := 2, 1, 2*(26+lim.OpBytes)+256 // the inode record
		for start := written; start < end; start += bs {
			bend := min(start+bs, end)
			var slices []chunkSlice
			var add []pendingChunk
			for _, c := range chunks {
				if c.end <= start || c.start >= bend {
					continue
				}
				lo, hi := max(c.start, start), min(c.end, bend)
				slices = append(slices, chunkSlice{h: c.h, off: uint32(lo - c.start), n: uint32(hi - lo)})
				if (len(need) == 0 || !bytes.Equal(need[len(need)-1].h, c.h)) && (len(add) == 0 || !bytes.Equal(add[len(add)-1].h, c.h)) {
					add = append(add, c)
				}
			}
			ref := appendChunkRef(nil, slices, nil)
			w, rd := writes+1+len(add), reads+len(add)
			z := size + 26 + lim.OpBytes + len(ref)
			for _, c := range add {
				z += 2*(33+lim.OpBytes) + len(c.data)
			}
			if len(blocks) > 0 && (w > lim.Writes || rd > lim.Reads || z > lim.Bytes) {
				end = start // the block goes into the next transaction
				break
			}
			writes, reads, size = w, rd, z
			blocks = append(blocks, chunkedBlock{uint64(start / bs), ref})
			need = append(need, add...)
		}
		if attr, err = f.putChunked(ino, written, end, blocks, need); err != nil {
			return attr, written, err
		}
		written = end
		// Chunks wholly written are no longer needed.
		keep := chunks[:0]
		for _, c := range chunks {
			if c.end > written {
				keep = append(keep, c)
			}
		}
		chunks = keep
	}
	return attr, written, nil
}

// chunkedBlock is a block's index and its chunk reference.
type chunkedBlock struct {
	idx uint64
	ref []byte
}

// putChunked stores the chunks in need and the block references of one
// WriteChunked transaction, growing ino from size from to size to.
func (f *View) putChunked(ino InodeID, from, to int64, blocks []chunkedBlock, need []pendingChunk) (Attr, error) {
	return f.updateFile(ino, func(tx kv.Txn, st state, refs *refLog, n *inode) error {
		switch {
		case from == 0 && n.Size != 0:
			return fmt.Errorf("cowfs: chunked write: the file is not empty (%d bytes)", n.Size)
		case n.Size != uint64(from):
			return fmt.Errorf("cowfs: chunked write: the file's size changed from %d to %d under it", from, n.Size)
		}
		cs := make([][2][]byte, len(need))
		for i, c := range need {
			cs[i] = [2][]byte{contentKey(c.h), c.data}
		}
		if err := f.s.putContents(f.ctx, tx, cs); err != nil {
			return err
		}
		// The new blocks lie past the file's end: the top layer holds
		// nothing there, so runs of them become extents at once.
		extents, err := f.s.extentsFormat(tx)
		if err != nil {
			return err
		}
		if !extents {
			for _, b := range blocks {
				if err := refs.set(tx, dataKey(st.stack[0], ino, b.idx), b.ref); err != nil {
					return err
				}
			}
		} else if err := groupExtents(blocks, func(last uint64, ref []byte, extent bool) error {
			if extent {
				return refs.set(tx, extentKey(st.stack[0], ino, last), ref)
			}
			return refs.set(tx, dataKey(st.stack[0], ino, last), ref)
		}); err != nil {
			return err
		}
		n.Size = uint64(to)
		n.Used = usedFor(n.Size)
		return nil
	})
}

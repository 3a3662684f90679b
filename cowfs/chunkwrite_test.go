package cowfs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/internal/txnsize"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// chunkHashes returns the chunk hashes layer l's references of ino name.
func chunkHashes(t *testing.T, f *View, ino InodeID) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for idx, ref := range layerRefs(t, f.s.kv, f.bs, f.Top(), ino) {
		if len(ref) == 0 || ref[0] != refChunks {
			t.Fatalf("block %d has reference tag %d, want a chunk reference", idx, ref[0])
		}
		refHashes(ref, func(h []byte) { out[string(h)] = true })
	}
	return out
}

// TestWriteChunkedDedupes: a file written with WriteChunked reads the same
// bytes as written, leaves Rechunk nothing to do, and shares every chunk
// but the first ones with a copy that has 10 bytes prepended, once the
// copy (written in fixed blocks) is rechunked.
func TestWriteChunkedDedupes(t *testing.T) {
	const bs = 32 << 10
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{BlockSize: bs})
	orig := randBytes(rand.New(rand.NewPCG(21, 22)), 4<<20+1000)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	attr, n, err := f.WriteChunked(a.Ino, bytes.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(orig)) || attr.Size != uint64(len(orig)) {
		t.Fatalf("WriteChunked wrote %d bytes, size %d; want %d", n, attr.Size, len(orig))
	}
	if got := readAll(t, f, a.Ino, len(orig)); !bytes.Equal(got, orig) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(orig))
	}
	if refs := layerRefs(t, f.s.kv, f.bs, f.Top(), a.Ino); len(refs) != (len(orig)+bs-1)/bs {
		t.Fatalf("%d block references, want %d", len(refs), (len(orig)+bs-1)/bs)
	}
	ca := chunkHashes(t, f, a.Ino)
	rs, err := sto.Rechunk(ctx, f.Top(), 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Blocks != 0 || rs.Bytes != 0 {
		t.Fatalf("Rechunk found %+v to do in a file WriteChunked wrote", rs)
	}
	b, err := f.Create(RootIno, "b", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	shifted := append([]byte("PREPEND010"), orig...)
	for off := 0; off < len(shifted); off += 64 << 10 {
		if _, err := f.WriteAt(b.Ino, shifted[off:min(off+64<<10, len(shifted))], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if rs, err = sto.Rechunk(ctx, f.Top(), 1<<40); err != nil {
		t.Fatal(err)
	}
	if rs.Blocks != (len(shifted)+bs-1)/bs {
		t.Fatalf("rechunked %d blocks of the copy, want %d", rs.Blocks, (len(shifted)+bs-1)/bs)
	}
	cb := chunkHashes(t, f, b.Ino)
	var own int
	for h := range cb {
		if !ca[h] {
			own++
		}
	}
	if own > 2 || rs.Chunks > 2 {
		t.Fatalf("the shifted copy has %d of its %d chunks not in the original (stored %d new ones), want at most the first 2", own, len(cb), rs.Chunks)
	}
	if got := readAll(t, f, b.Ino, len(shifted)); !bytes.Equal(got, shifted) {
		t.Fatal("the copy reads other bytes")
	}
	// A file that is not empty is refused, and keeps its bytes.
	if _, _, err := f.WriteChunked(b.Ino, bytes.NewReader(orig)); err == nil {
		t.Fatal("WriteChunked into a non-empty file succeeded")
	}
	if got := readAll(t, f, b.Ino, len(shifted)); !bytes.Equal(got, shifted) {
		t.Fatal("the copy reads other bytes after a refused WriteChunked")
	}
}

// TestWriteChunkedFitsLimits: every WriteChunked transaction fits the
// store's Limits (etcd's defaults), also with many small chunks a block,
// and short files (one partial block) work.
func TestWriteChunkedFitsLimits(t *testing.T) {
	const bs = 32 << 10
	defer func(old struct{ min, max, avgBits int }) { chunkSizes = old }(chunkSizes)
	chunkSizes.min, chunkSizes.max, chunkSizes.avgBits = 1<<10, 8<<10, 11 // ~8 chunks a block
	rec := txnsize.New(limitedStore{kvtest.NewStore(t)})
	_, f := newTestTree(t, rec, Options{BlockSize: bs})
	r := rand.New(rand.NewPCG(23, 24))
	for i, size := range []int{100, bs, 3<<20 + 5} {
		want := randBytes(r, size)
		a, err := f.Create(RootIno, string(rune('a'+i)), CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		rec.Take()
		if _, _, err := f.WriteChunked(a.Ino, bytes.NewReader(want)); err != nil {
			t.Fatal(err)
		}
		lim := rec.Limits()
		for _, tx := range rec.Take() {
			bytes := tx.Bytes + int64((tx.Writes+tx.Compares())*lim.OpBytes)
			if tx.Writes > lim.Writes || tx.Compares() > lim.Reads || bytes > int64(lim.Bytes) {
				t.Fatalf("a transaction of %d writes, %d reads and %d bytes exceeds the store's limits %+v", tx.Writes, tx.Compares(), bytes, lim)
			}
		}
		if got := readAll(t, f, a.Ino, len(want)); !bytes.Equal(got, want) {
			t.Fatalf("file of %d bytes reads %d other bytes", size, len(got))
		}
	}
}

package cowfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/internal/txnsize"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestChunkPolIrreducible: the chunker refuses a reducible polynomial.
func TestChunkPolIrreducible(t *testing.T) {
	if !chunkPol.Irreducible() {
		t.Fatal("chunkPol is reducible")
	}
}

// TestRefHashesEveryKind: refHashes (behind the sweep's mark phase and
// every write's log) names each content hash of every reference kind. A
// new tag without a case here fails the test.
func TestRefHashesEveryKind(t *testing.T) {
	h := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	cases := map[byte]struct {
		ref  []byte
		want [][]byte
	}{
		refHash:   {append([]byte{refHash}, h(1)...), [][]byte{h(1)}},
		refInline: {[]byte{refInline, 'x', 'y'}, nil},
		refZero:   {[]byte{refZero}, nil},
		refPatch:  {append(append([]byte{refPatch}, h(2)...), 0, 0, 0, 1, 0, 0, 0, 1, 'z'), [][]byte{h(2)}},
		refChunks: {appendChunkRef(nil, []chunkSlice{{h(3), 5, 100}, {h(4), 0, 200}, {h(5), 0, 7}}, []byte{0, 0, 0, 1, 0, 0, 0, 1, 'z'}),
			[][]byte{h(3), h(4), h(5)}},
	}
	for tag := byte(1); tag <= refChunks; tag++ {
		c, ok := cases[tag]
		if !ok {
			t.Fatalf("reference tag %d has no case: add it here and to refHashes", tag)
		}
		var got [][]byte
		refHashes(c.ref, func(x []byte) { got = append(got, bytes.Clone(x)) })
		if len(got) != len(c.want) {
			t.Fatalf("tag %d: refHashes names %d hashes, want %d", tag, len(got), len(c.want))
		}
		for i := range got {
			if !bytes.Equal(got[i], c.want[i]) {
				t.Fatalf("tag %d: hash %d = %x, want %x", tag, i, got[i][:4], c.want[i][:4])
			}
		}
	}
}

func sum(p []byte) [32]byte { return sha256.Sum256(p) }

// layerRefs returns the references layer l holds for ino, by block index.
func layerRefs(t testing.TB, st kv.Store, bs uint64, l LayerID, ino InodeID) map[uint64][]byte {
	t.Helper()
	out := map[uint64][]byte{}
	err := st.View(context.Background(), func(tx kv.Txn) error {
		return tx.Iterate(dataPrefix(l, ino), nil, false, func(k, v []byte) (bool, error) {
			if !isExtentKey(k) {
				out[keyBlock(k)] = bytes.Clone(v)
				return true, nil
			}
			// An extent: the blocks its own references do not cover.
			e, err := decodeExtent(keyBlock(k), v, bs)
			if err != nil {
				return false, err
			}
			return true, e.blockRefs(bs, 0, e.last, func(idx uint64, ref []byte) bool {
				if _, ok := out[idx]; !ok {
					out[idx] = ref
				}
				return true
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRechunkReadsSame: after rechunking, every file reads the same bytes
// through every reference kind (chunk slices, chunk slices with edits,
// patches, inline, zeros, holes), across layers, a Cut and truncations,
// in reads of every alignment, before and after a fold and a sweep; and a
// copy shifted by a few bytes shares most chunks with the original.
func TestRechunkReadsSame(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, st, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(11, 12))
	fm := newFileModel(t, f)
	models := fm.files
	names := map[string]InodeID{}
	mk := func(name string, p []byte) InodeID {
		ino := fm.create(name, p)
		names[name] = ino
		return ino
	}
	write, truncate := fm.write, fm.truncate
	check := func(when string) {
		t.Helper()
		for name, ino := range names {
			want := models[ino]
			for _, step := range []int{len(want) + 10, 1 << 20, 3*bs + 17, 1000} {
				got := make([]byte, 0, len(want))
				buf := make([]byte, step)
				for off := 0; ; {
					n, eof, err := f.ReadAt(ino, buf, int64(off))
					if err != nil {
						t.Fatalf("%s: %s: read at %d: %v", when, name, off, err)
					}
					got = append(got, buf[:n]...)
					off += n
					if eof || n == 0 {
						break
					}
				}
				if sum(got) != sum(want) {
					t.Fatalf("%s: %s read in steps of %d: %d bytes, hash differs from the %d written", when, name, step, len(got), len(want))
				}
			}
		}
	}
	orig := randBytes(r, 1<<20+1000)
	a := mk("a", orig)
	b := mk("b", append([]byte("PREPEND010"), orig...))
	mk("small", randBytes(r, bs-100))
	holes := mk("holes", randBytes(r, 40*bs))
	write(holes, 10*bs, make([]byte, 3*bs)) // zeros in the middle
	write(holes, 20*bs+5, []byte("edit"))   // a patch splits the run
	truncate(holes, 30*bs+7)
	write(holes, 35*bs, randBytes(r, 100)) // grown again: a hole, then a block
	x, y := pushLayer(t, f)
	write(a, 5*bs+3, []byte("patch-of-a-hash-block")) // patch over y's plain block
	truncate(b, 100*bs+9)                             // x's Cut hides y's blocks past it
	write(b, 120*bs, randBytes(r, 2*bs))
	check("before rechunking")

	rs, err := sto.Rechunk(ctx, y, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Blocks == 0 || rs.Chunks == 0 {
		t.Fatalf("rechunk of y swapped nothing: %+v", rs)
	}
	ra, rb := layerRefs(t, st, bs, y, a), layerRefs(t, st, bs, y, b)
	ha, hb := map[string]bool{}, map[string]bool{}
	for _, v := range ra {
		if v[0] != refChunks {
			t.Fatalf("a's block in y has tag %d after rechunking, want %d", v[0], refChunks)
		}
		refHashes(v, func(h []byte) { ha[string(h)] = true })
	}
	for _, v := range rb {
		refHashes(v, func(h []byte) { hb[string(h)] = true })
	}
	shared := 0
	for h := range hb {
		if ha[h] {
			shared++
		}
	}
	if shared < len(hb)-2 {
		t.Fatalf("the copy shifted by 10 bytes shares %d of its %d chunks with the original, want all but the first and last", shared, len(hb))
	}
	check("after rechunking y")
	// Small edits of chunk-referenced blocks stay patches.
	write(a, 9*bs+100, []byte("0123456789"))
	write(a, 9*bs+2000, []byte("abcdefghij"))
	if v := layerRefs(t, st, bs, x, a)[9]; len(v) == 0 || v[0] != refChunks || len(v) > 200 {
		t.Fatalf("a 10-byte edit of a chunk-referenced block stored %d bytes with tag %v, want a chunk reference with edits", len(v), v[:min(1, len(v))])
	}
	check("after edits of chunk-referenced blocks")
	// Rechunking the top layer: its run of written blocks of b.
	if _, err := sto.Rechunk(ctx, x, 1<<40); err != nil {
		t.Fatal(err)
	}
	check("after rechunking x")
	truncate(a, 7*bs+5) // inside a chunk-referenced block
	write(a, 8*bs, []byte("grown"))
	check("after truncating a")
	if err := sto.FoldDown(ctx, x, y); err != nil {
		t.Fatal(err)
	}
	folded, err := sto.OpenView(ctx, y)
	if err != nil {
		t.Fatal(err)
	}
	f, fm.f = folded, folded
	check("after folding x into y")
	sweepAround(t, sto, func() {})
	check("after a sweep")
}

// TestSweepKeepsChunks: after rechunking, a sweep deletes the plain blocks
// nothing names any more and keeps every chunk a chunk reference names.
func TestSweepKeepsChunks(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, st, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(13, 14))
	want := randBytes(r, 512<<10)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, want, 0); err != nil {
		t.Fatal(err)
	}
	plain := map[string]bool{}
	for _, v := range layerRefs(t, st, f.bs, f.Top(), a.Ino) {
		refHashes(v, func(h []byte) { plain[string(h)] = true })
	}
	if _, err := sto.Rechunk(ctx, f.Top(), 1<<40); err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, v := range layerRefs(t, st, f.bs, f.Top(), a.Ino) {
		refHashes(v, func(h []byte) { named[string(h)] = true })
	}
	sweepAround(t, sto, func() {})
	stored := storedContent(t, sto)
	for h := range named {
		if !stored[h] {
			t.Fatalf("the sweep deleted chunk %x a chunk reference names", h[:8])
		}
	}
	for h := range plain {
		if stored[h] && !named[h] {
			t.Fatalf("the sweep kept plain block %x nothing names", h[:8])
		}
	}
	if got := readAll(t, f, a.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes after the sweep, want %d (equal=%v)", len(got), len(want), bytes.Equal(got, want))
	}
}

// TestRechunkRaceSweep: chunks a rechunk stores while a sweep runs survive
// the sweep (they are referenced from the transaction that stores them).
func TestRechunkRaceSweep(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(15, 16))
	leaveGarbage(t, f, "garbage", randBytes(r, bs), randBytes(r, 1000))
	want := randBytes(r, 256<<10)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, want, 0); err != nil {
		t.Fatal(err)
	}
	sweepAround(t, sto, func() {
		if rs, err := sto.Rechunk(ctx, f.Top(), 1<<40); err != nil || rs.Blocks == 0 {
			t.Fatalf("rechunk: %+v, %v", rs, err)
		}
	})
	if got := readAll(t, f, a.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes after the sweep, want %d (equal=%v)", len(got), len(want), bytes.Equal(got, want))
	}
}

// TestChunkReadFetchesOnce: reading a range of chunk-referenced blocks
// with one blockReader (as one READ does) fetches each chunk once.
func TestChunkReadFetchesOnce(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(17, 18))
	want := randBytes(r, 2<<20)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, want, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := sto.Rechunk(ctx, f.Top(), 1<<40); err != nil {
		t.Fatal(err)
	}
	first, last := uint64(10), uint64(10+(1<<20)/bs-1) // a 1 MiB READ
	err = f.view(func(tx kv.Txn, s state) error {
		for _, skew := range []uint64{0, 100} { // aligned, and not
			br, err := f.newBlockReader(tx, s, a.Ino)
			if err != nil {
				return err
			}
			blocks, err := br.blockRange(first, last+1)
			if err != nil {
				return err
			}
			distinct := map[string]bool{}
			for _, rb := range blocks[:len(blocks)-1] {
				refHashes(rb.ref, func(h []byte) { distinct[string(h)] = true })
			}
			if len(distinct) < 4 {
				t.Fatalf("1 MiB spans %d chunks: the test needs several", len(distinct))
			}
			off := first*bs + skew
			p := make([]byte, 1<<20)
			if err := br.readBlocks(blocks, first, p, off, nil); err != nil {
				return err
			}
			if !bytes.Equal(p, want[off:off+1<<20]) {
				t.Fatalf("a 1 MiB READ at %d reads other bytes", off)
			}
			if br.chunks.fetches > len(distinct)+1 || skew == 0 && br.chunks.fetches != len(distinct) {
				t.Fatalf("a 1 MiB READ at %d fetched chunks %d times, want %d (once per chunk)", off, br.chunks.fetches, len(distinct))
			}
		}
		br, err := f.newBlockReader(tx, s, a.Ino)
		if err != nil {
			return err
		}
		blocks, err := br.blockRange(first, last)
		if err != nil {
			return err
		}
		buf := make([]byte, bs)
		// A READ of a few bytes of one block reads one chunk, not all the
		// block uses.
		for i, rb := range blocks {
			if sl, _, _ := chunkRefParts(rb.ref); len(sl) < 2*sliceLen {
				continue
			}
			one := &blockReader{f: f, tx: tx, ino: a.Ino}
			if err := one.contentRange(rb, buf, 10, 20); err != nil {
				return err
			}
			if off := (first + uint64(i)) * bs; !bytes.Equal(buf[10:20], want[off+10:off+20]) {
				t.Fatalf("bytes 10-20 of block %d read other bytes", first+uint64(i))
			}
			if one.chunks.fetches != 1 {
				t.Fatalf("10 bytes of a block made of several chunks fetched %d chunks, want 1", one.chunks.fetches)
			}
			return nil
		}
		t.Fatal("no block of the range is made of several chunks")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// limitedStore reports etcd's default transaction limits.
type limitedStore struct{ kv.Store }

func (limitedStore) Limits() kv.Limits {
	return kv.Limits{Writes: 128, Reads: 128, Bytes: 3 << 19, OpBytes: 24}
}

// TestRechunkFitsLimits: every rechunk transaction fits the store's
// Limits (here etcd's defaults), also when blocks are cut into many small
// chunks, and the whole file is still rechunked.
func TestRechunkFitsLimits(t *testing.T) {
	const bs = 32 << 10
	ctx := context.Background()
	defer func(old struct{ min, max, avgBits int }) { chunkSizes = old }(chunkSizes)
	chunkSizes.min, chunkSizes.max, chunkSizes.avgBits = 1<<10, 8<<10, 11 // ~8 chunks a block
	rec := txnsize.New(limitedStore{kvtest.NewStore(t)})
	sto, f := newTestTree(t, rec, Options{BlockSize: bs})
	want := randBytes(rand.New(rand.NewPCG(19, 20)), 4<<20)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += 64 << 10 { // NFS-sized writes
		if _, err := f.WriteAt(a.Ino, want[off:off+64<<10], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	rec.Take()
	rs, err := sto.Rechunk(ctx, f.Top(), 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Blocks != len(want)/bs {
		t.Fatalf("rechunked %d blocks, want all %d", rs.Blocks, len(want)/bs)
	}
	lim := rec.Limits()
	txns := rec.Take()
	for _, tx := range txns {
		bytes := tx.Bytes + int64((tx.Writes+tx.Compares())*lim.OpBytes)
		if tx.Writes > lim.Writes || tx.Compares() > lim.Reads || bytes > int64(lim.Bytes) {
			t.Fatalf("a rechunk transaction of %d writes, %d reads and %d bytes exceeds the store's limits %+v", tx.Writes, tx.Compares(), bytes, lim)
		}
	}
	if got := readAll(t, f, a.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes after rechunking, want %d (equal=%v)", len(got), len(want), bytes.Equal(got, want))
	}
	t.Logf("%d transactions, %d chunks", len(txns), rs.Chunks)
}

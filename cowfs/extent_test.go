package cowfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// layerKeys lists layer l's data keys of ino: each block reference as
// "b<idx>", each extent as "x<first>-<last>", in key order.
func layerKeys(t testing.TB, st kv.Store, bs uint64, l LayerID, ino InodeID) []string {
	t.Helper()
	var out []string
	err := st.View(context.Background(), func(tx kv.Txn) error {
		return tx.Iterate(dataPrefix(l, ino), nil, false, func(k, v []byte) (bool, error) {
			if !isExtentKey(k) {
				out = append(out, fmt.Sprintf("b%d", keyBlock(k)))
				return true, nil
			}
			e, err := decodeExtent(keyBlock(k), v, bs)
			if err != nil {
				return false, err
			}
			out = append(out, fmt.Sprintf("x%d-%d", e.first, e.last))
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkFiles reads every file of the model whole and in steps that cut
// blocks, and compares.
func checkFiles(t *testing.T, fm *fileModel, when string, bs int) {
	t.Helper()
	for ino, want := range fm.files {
		for _, step := range []int{len(want) + 10, 3*bs + 17, 1 << 20} {
			got := make([]byte, 0, len(want))
			buf := make([]byte, step)
			for off := 0; ; {
				n, eof, err := fm.f.ReadAt(ino, buf, int64(off))
				if err != nil {
					t.Fatalf("%s: inode %d: read at %d: %v", when, ino, off, err)
				}
				got = append(got, buf[:n]...)
				off += n
				if eof || n == 0 {
					break
				}
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("%s: inode %d read in steps of %d: %d bytes, want %d; first difference at byte %d (block %d)",
					when, ino, step, len(got), len(want), i, i/bs)
			}
		}
	}
}

// TestExtentPaths walks one file through each path that meets an extent:
// chunk references of the old format (one per block) read, then become
// extents; a write inside an extent of the same layer splits it; a
// truncate inside one cuts it; a write in an upper layer shadows part of
// one; a fold of a layer holding extents into one holding extents; a
// prune; a sweep. The file reads the same throughout, and the keys are
// what each path should leave.
func TestExtentPaths(t *testing.T) {
	const bs = 4096
	// The keys below assume the file's 41 blocks in chunks of 8-128 KiB,
	// under one extent's 24 slices: no smaller chunks at its head.
	defer func(old struct{ bytes, min, max, avgBits int }) { headSizes = old }(headSizes)
	headSizes.bytes = 0
	ctx := context.Background()
	f, st, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(21, 22))
	fm := newFileModel(t, f)
	a := fm.create("a", randBytes(r, 40*bs+100))
	top := f.Top()
	check := func(when string) { t.Helper(); checkFiles(t, fm, when, bs) }
	keys := func() string { return fmt.Sprint(layerKeys(t, st, bs, f.Top(), a)) }

	// Chunk references one per block: what stores of the previous format
	// hold.
	if _, err := sto.rechunkPlain(ctx, top, 1<<40); err != nil {
		t.Fatal(err)
	}
	for idx, v := range layerRefs(t, st, bs, top, a) {
		if v[0] != refChunks {
			t.Fatalf("block %d has tag %d after rechunking without extents, want %d", idx, v[0], refChunks)
		}
	}
	check("chunk references per block")
	n, err := sto.coalesce(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(), "[x0-40]"; n != 1 || got != want {
		t.Fatalf("after coalescing: %d extents, keys %s; want 1, %s", n, got, want)
	}
	check("one extent")

	// A 10-byte write into block 20, same layer: the extent splits around
	// the block, which gets its own (patch) reference.
	fm.write(a, 20*bs+7, []byte("0123456789"))
	if got, want := keys(), "[x0-19 b20 x21-40]"; got != want {
		t.Fatalf("after a write inside the extent: keys %s, want %s", got, want)
	}
	check("write inside an extent")
	// Writes across both extents and the block between.
	fm.write(a, 18*bs+100, randBytes(r, 4*bs))
	if got, want := keys(), "[x0-17 b18 b19 b20 b21 b22 x23-40]"; got != want {
		t.Fatalf("after a write across extents: keys %s, want %s", got, want)
	}
	check("write across extents")

	// Truncate inside the second extent: it ends before the trimmed block.
	fm.truncate(a, 30*bs+9)
	if got, want := keys(), "[x0-17 b18 b19 b20 b21 b22 x23-29 b30]"; got != want {
		t.Fatalf("after a truncate inside an extent: keys %s, want %s", got, want)
	}
	check("truncate inside an extent")
	fm.write(a, 33*bs, []byte("grown again"))
	check("grown after the truncate")

	// An upper layer over the extents: a write there shadows a block,
	// a truncate there hides the rest; then its own blocks become an
	// extent, and it is folded into the layer below.
	x, y := pushLayer(t, f)
	fm.write(a, 2*bs+5, []byte("upper"))
	fm.truncate(a, 26*bs+50)
	fm.write(a, 27*bs, randBytes(r, 8*bs))
	check("upper layer over extents")
	if _, err := sto.Rechunk(ctx, x, 1<<40); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(layerKeys(t, st, bs, x, a)); got != "[b2 x27-34]" {
		t.Fatalf("upper layer after rechunking: keys %s, want [b2 x27-34]", got)
	}
	check("extents in both layers")
	if _, err := sto.PruneShadowed(ctx, x, y); err != nil {
		t.Fatal(err)
	}
	check("after a prune")
	if err := sto.FoldDown(ctx, x, y); err != nil {
		t.Fatal(err)
	}
	folded, err := sto.OpenView(ctx, y)
	if err != nil {
		t.Fatal(err)
	}
	fm.f = folded
	if got, want := fmt.Sprint(layerKeys(t, st, bs, y, a)), "[x0-1 b2 x3-17 b18 b19 b20 b21 b22 x23-25 b26 x27-34]"; got != want {
		t.Fatalf("after the fold: keys %s, want %s", got, want)
	}
	check("after the fold")
	sweepAround(t, sto, func() {})
	check("after a sweep")
}

// TestExtentsModel runs random writes, truncates, rechunks (making
// extents), new layers, prunes, folds and sweeps over a few files, on a
// store with etcd's limits, and checks every file against a model after
// each step.
func TestExtentsModel(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := 0; seed < seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			st := kvtest.Limited(kvtest.NewStore(t), kv.Limits{Writes: 128, Reads: 128, Bytes: 3<<19 - 512, OpBytes: 24})
			sto, f := newTestTree(t, st, Options{BlockSize: bs, InlineMax: 64})
			r := rand.New(rand.NewPCG(uint64(seed), 77))
			fm := newFileModel(t, f)
			orig := randBytes(r, 150*bs+r.IntN(bs))
			var inos []InodeID
			for i, p := range [][]byte{orig, append([]byte("PREPEND010"), orig...), randBytes(r, 20*bs+r.IntN(bs))} {
				ino := fm.create(fmt.Sprint("f", i), nil)
				for off := 0; off < len(p); off += 16 * bs { // what a transaction takes
					fm.write(ino, off, p[off:min(off+16*bs, len(p))])
				}
				inos = append(inos, ino)
			}
			depth := 1
			extents := 0
			for step := 0; step < 40; step++ {
				ino := inos[r.IntN(len(inos))]
				size := len(fm.files[ino])
				var op string
				switch k := r.IntN(10); {
				case k < 3:
					off := r.IntN(size + 2*bs)
					fm.write(ino, off, randBytes(r, 1+r.IntN(100)))
					op = fmt.Sprintf("small write at %d", off)
				case k < 5:
					off := r.IntN(size + 2*bs)
					n := 1 + r.IntN(12*bs) // what a transaction takes
					fm.write(ino, off, randBytes(r, n))
					op = fmt.Sprintf("write of %d at %d", n, off)
				case k == 5:
					sz := r.IntN(size + 4*bs)
					op = fmt.Sprintf("truncate to %d", sz)
					// Dropping more blocks than a transaction of etcd's
					// takes fails, and changes nothing.
					s := uint64(sz)
					if _, err := fm.f.SetAttr(ino, SetAttr{Size: &s}); errors.Is(err, syscall.EFBIG) {
						op += " refused (EFBIG)"
						break
					}
					fm.truncate(ino, sz)
				case k == 6:
					rs, err := sto.Rechunk(ctx, fm.f.Top(), 1<<40)
					if err != nil {
						t.Fatal(err)
					}
					extents += rs.Extents
					op = fmt.Sprintf("rechunk of the top: %+v", rs)
				case k == 7 && depth < 3:
					pushLayer(t, fm.f)
					depth++
					op = "new layer"
				case k == 8 && depth > 1:
					x, y := fm.f.Top(), LayerID(0)
					stack := fm.f.Stack()
					y = stack[1]
					if rs, err := sto.Rechunk(ctx, y, 1<<40); err != nil {
						t.Fatal(err)
					} else {
						extents += rs.Extents
					}
					if _, err := sto.PruneShadowed(ctx, x, y); err != nil {
						t.Fatal(err)
					}
					op = "rechunk and prune of the layer below"
				case k == 9 && depth > 1:
					stack := fm.f.Stack()
					if err := sto.FoldDown(ctx, stack[0], stack[1]); err != nil {
						t.Fatal(err)
					}
					v, err := sto.OpenView(ctx, stack[1])
					if err != nil {
						t.Fatal(err)
					}
					fm.f = v
					depth--
					op = "fold"
				default:
					sweep(t, sto)
					op = "sweep"
				}
				checkFiles(t, fm, fmt.Sprintf("step %d (%s)", step, op), bs)
			}
			if extents == 0 {
				t.Fatal("no extent was made: the model did not reach them")
			}
		})
	}
}

// keyCountingStore counts the keys transactions iterate over, and point
// reads.
type keyCountingStore struct {
	kv.Store
	keys atomic.Int64
}

func (c *keyCountingStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	return c.Store.View(ctx, func(tx kv.Txn) error { return fn(keyCountingTxn{tx, c}) })
}

func (c *keyCountingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return c.Store.Update(ctx, func(tx kv.Txn) error { return fn(keyCountingTxn{tx, c}) })
}

type keyCountingTxn struct {
	kv.Txn
	c *keyCountingStore
}

func (t keyCountingTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	return t.Txn.Iterate(prefix, start, keysOnly, func(k, v []byte) (bool, error) {
		if len(k) > 9 && k[0] == pfxLayerData && k[9] == kindData {
			t.c.keys.Add(1)
		}
		return fn(k, v)
	})
}

// TestExtentReadKeys: a 1 MiB READ of a file of 32 KiB blocks takes its
// block references from one to three extent keys, where chunk references
// one per block take 33 (the 32 blocks' and the one after, which ends the
// iteration).
func TestExtentReadKeys(t *testing.T) {
	const bs = 32 << 10
	ctx := context.Background()
	cs := &keyCountingStore{Store: kvtest.NewStore(t)}
	// Without the caches of references, which would read whole groups
	// of blocks once and then none.
	sto, f := newTestTree(t, cs, Options{BlockSize: bs, BlockCacheBytes: -1})
	data := make([]byte, 16<<20)
	rand.NewChaCha8([32]byte{9}).Read(data)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 1<<20)
	read := func(off int) int64 {
		t.Helper()
		cs.keys.Store(0)
		n, _, err := f.ReadAt(a.Ino, buf, int64(off))
		if err != nil || n != len(buf) || !bytes.Equal(buf, data[off:off+n]) {
			t.Fatalf("read at %d: %d bytes, %v, or not the bytes written", off, n, err)
		}
		return cs.keys.Load()
	}
	if _, err := sto.rechunkPlain(ctx, f.Top(), 1<<40); err != nil {
		t.Fatal(err)
	}
	// 32 and the one after, which ends the READ's iteration.
	if k := read(4 << 20); k != 33 {
		t.Fatalf("a 1 MiB READ over chunk references per block iterated %d keys, want 33", k)
	}
	if _, err := sto.coalesce(ctx, f.Top()); err != nil {
		t.Fatal(err)
	}
	// Extents of up to maxExtentSlices chunks (about 1 MiB), each
	// reference under Badger's value threshold: a 1 MiB READ meets two or
	// three.
	err = cs.View(ctx, func(tx kv.Txn) error {
		return tx.Iterate(dataPrefix(f.Top(), a.Ino), nil, false, func(k, v []byte) (bool, error) {
			if !isExtentKey(k) || len(v) >= 1024 {
				return false, fmt.Errorf("key %x: %d bytes; want only extents, each under 1 KiB", k, len(v))
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for off := 0; off < len(data); off += 1 << 20 {
		k := read(off)
		if k < 1 || k > 3 {
			t.Fatalf("a 1 MiB READ at %d of extents iterated %d keys, want 1 to 3", off, k)
		}
		total += k
	}
	t.Logf("16 READs of 1 MiB iterated %d keys (33 each over chunk references per block)", total)
}

// sweep runs a block sweep marking what every layer names.
func sweep(t *testing.T, s *Store) {
	t.Helper()
	runSweep(t, s, func() {})
}

// TestWriteChunkedWritesExtents: a chunked write (an import) stores runs
// of blocks as extents at once, each within maxExtentSlices, so GC finds
// nothing to rechunk or coalesce after it, and the file reads back.
func TestWriteChunkedWritesExtents(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, st, sto := newTestFS(t, Options{BlockSize: bs})
	data := make([]byte, 3<<20+123)
	rand.NewChaCha8([32]byte{3}).Read(data)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteChunked(a.Ino, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	keys := layerKeys(t, st, bs, f.Top(), a.Ino)
	extents := 0
	for _, k := range keys {
		if k[0] == 'x' {
			extents++
		}
	}
	if blocks := (len(data) + bs - 1) / bs; extents == 0 || len(keys) > blocks/8 {
		t.Fatalf("a chunked write of %d blocks left %d keys, %d of them extents; want a few extents", blocks, len(keys), extents)
	}
	rs, err := sto.Rechunk(ctx, f.Top(), 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if rs != (RechunkStats{}) {
		t.Fatalf("rechunking after a chunked write did %+v, want nothing", rs)
	}
	if got := readAll(t, f, a.Ino, len(data)); !bytes.Equal(got, data) {
		t.Fatal("the chunked write reads back other bytes")
	}
}

// TestExtentsFormat: a new store is of format 3; a store of format 2
// becomes 3 with its first extent (so that a build predating extents
// refuses it); a store of format 1 gets no extents and keeps no format
// record (which would lose that its names hash the old way).
func TestExtentsFormat(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	format := func(st kv.Store) uint64 {
		t.Helper()
		var f uint64
		err := st.View(ctx, func(tx kv.Txn) error {
			v, err := tx.Get(formatKey)
			if errors.Is(err, kv.ErrNotFound) {
				return nil
			}
			if err == nil {
				f = binary.BigEndian.Uint64(v)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// rechunked writes a file of 40 blocks into a new tree of st and
	// rechunks it, and returns the extents made.
	rechunked := func(st kv.Store) int {
		t.Helper()
		s, f := newTestTree(t, st, Options{BlockSize: bs})
		data := randBytes(rand.New(rand.NewPCG(5, 6)), 40*bs)
		a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
			t.Fatal(err)
		}
		rs, err := s.Rechunk(ctx, f.Top(), 1<<40)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, f, a.Ino, len(data)); !bytes.Equal(got, data) {
			t.Fatal("the rechunked file reads other bytes")
		}
		return rs.Extents
	}

	st := kvtest.NewStore(t)
	if n := rechunked(st); n == 0 || format(st) != 3 {
		t.Fatalf("new store: %d extents, format %d; want some, 3", n, format(st))
	}

	two := kvtest.NewStore(t)
	if _, err := Open(ctx, two, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := two.Update(ctx, func(tx kv.Txn) error { return tx.Set(formatKey, u64(nil, 2)) }); err != nil {
		t.Fatal(err)
	}
	if n := rechunked(two); n == 0 || format(two) != 3 {
		t.Fatalf("store of format 2: %d extents, format %d after; want some, 3", n, format(two))
	}

	one := kvtest.NewStore(t) // layers but no format record
	if _, err := newStore(one, Options{}).NewTree(ctx, 0o755, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	if n := rechunked(one); n != 0 || format(one) != 0 {
		t.Fatalf("store of format 1: %d extents, format %d after; want none, no record", n, format(one))
	}
}

package cowfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/zeebo/blake3"
)

// insertCost is what a copy of an imported file with bytes inserted adds
// once rechunked.
type insertCost struct {
	added   int64 // bytes of the chunks the copy names and the original does not
	chunks  int   // how many
	keys    int   // the copy's data keys (block references and extents)
	origNew int   // chunks the import stored
}

// measureInsert imports data (WriteChunked, as init --from does), writes
// a copy with ins inserted at offset at in fixed blocks (as an NFS client
// would), rechunks it (as GC would), checks the copy reads back its bytes
// and returns what it adds.
func measureInsert(t testing.TB, f *View, sto *Store, data, ins []byte, at int, name string) insertCost {
	t.Helper()
	ctx := context.Background()
	a, err := f.Create(RootIno, name+".orig", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteChunked(a.Ino, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	b, err := f.Create(RootIno, name+".copy", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cp := append(append(append(make([]byte, 0, len(data)+len(ins)), data[:at]...), ins...), data[at:]...)
	for off := 0; off < len(cp); off += 1 << 20 {
		if _, err := f.WriteAt(b.Ino, cp[off:min(off+1<<20, len(cp))], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := sto.Rechunk(ctx, f.Top(), 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if whole := len(cp) / int(f.bs); rs.Blocks < whole {
		t.Fatalf("rechunked %d blocks of the copy, want its %d whole ones", rs.Blocks, whole)
	}
	got := make([]byte, len(cp)+1)
	if n, _, err := f.ReadAt(b.Ino, got, 0); err != nil || n != len(cp) || sha256.Sum256(got[:n]) != sha256.Sum256(cp) {
		t.Fatalf("the copy (%d bytes inserted at %d) reads %d other bytes (%v)", len(ins), at, n, err)
	}
	orig := map[string]bool{}
	for _, v := range layerRefs(t, f.s.kv, f.bs, f.Top(), a.Ino) {
		refHashes(v, func(h []byte) { orig[string(h)] = true })
	}
	extra := map[string]bool{}
	for _, v := range layerRefs(t, f.s.kv, f.bs, f.Top(), b.Ino) {
		refHashes(v, func(h []byte) {
			if !orig[string(h)] {
				extra[string(h)] = true
			}
		})
	}
	c := insertCost{chunks: len(extra), keys: len(layerKeys(t, f.s.kv, f.bs, f.Top(), b.Ino)), origNew: len(orig)}
	err = f.s.kv.View(ctx, func(tx kv.Txn) error {
		for h := range extra {
			v, err := tx.Get(contentKey([]byte(h)))
			if err != nil {
				return err
			}
			c.added += int64(len(v))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if int(rs.Chunks) != c.chunks {
		t.Fatalf("the rechunk stored %d chunks, the copy names %d the original does not", rs.Chunks, c.chunks)
	}
	return c
}

// TestHeadChunksPrepend: a copy of an imported 32 MiB file with 10 bytes
// prepended, or inserted within its first 64 KiB, adds less than
// 0.0256 MiB of chunks once rechunked (LayerFS's figure for a 10-byte
// prepend), for each of five files: the import and the rechunk cut the
// file's head into small chunks alike, so the insert stores one small
// chunk anew, and the rechunk's run takes in the copy's short last block
// (stored inline), so its last chunk is the original's. With 8-128 KiB
// chunks throughout it stored the chunk the insert falls in, 40 KiB on
// average, and a run that ended before the inline block cut a last chunk
// of its own.
func TestHeadChunksPrepend(t *testing.T) {
	const limit = 26843 // 0.0256 MiB
	for seed := uint64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewPCG(seed, 77))
		data := randBytes(r, 32<<20)
		at := r.IntN(64 << 10)
		for _, c := range []struct {
			name string
			at   int
		}{{"prepend", 0}, {fmt.Sprintf("insert at %d", at), at}} {
			f, _, sto := newTestFS(t, Options{BlockSize: 32 << 10})
			got := measureInsert(t, f, sto, data, []byte("PREPEND010"), c.at, "f")
			t.Logf("seed %d, %s: %d bytes in %d new chunks; %d keys", seed, c.name, got.added, got.chunks, got.keys)
			if got.added >= limit || got.chunks != 1 {
				t.Errorf("seed %d, %s: the copy adds %d bytes in %d chunks, want < %d bytes in 1 (the chunk the insert falls in)", seed, c.name, got.added, got.chunks, limit)
			}
		}
	}
}

// cutChunks cuts data as a file from offset 0 and returns its chunks'
// lengths by hash.
func cutChunks(t testing.TB, data []byte) map[[32]byte]int {
	t.Helper()
	ch := newChunker(bytes.NewReader(data), 0)
	buf := make([]byte, chunkBufSize())
	out := map[[32]byte]int{}
	for {
		c, err := ch.Next(buf)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[blake3.Sum256(c.Data)] = int(c.Length)
	}
}

// BenchmarkHeadChunkSizes measures, per head chunking (headSizes: none,
// then head lengths and bounds), what a copy of an imported 32 MiB file
// with 10 bytes prepended adds once rechunked, over five files (the mean
// and largest bytes of new chunks, and the copy's data keys), and, cutting
// 1,000 files of 160 KiB and copies with 10 bytes inserted at offset 0 or
// at a random offset in the first 64 KiB, how often the copy has more
// than one new chunk and how often its new chunks exceed 26,643 bytes
// (0.0256 MiB less 200 for the store's entries), in percent, and the
// chunks per file. It is how the head sizes were picked (headSizes).
func BenchmarkHeadChunkSizes(b *testing.B) {
	defer func(old struct{ bytes, min, max, avgBits int }) { headSizes = old }(headSizes)
	defer func(old int64) { headFileMin = old }(headFileMin)
	headFileMin = 0 // the 160 KiB files too
	for _, p := range []struct{ bytes, min, max, avgBits int }{
		{0, 0, 0, 0}, {64 << 10, 1 << 10, 16 << 10, 11}, {64 << 10, 2 << 10, 16 << 10, 12},
		{64 << 10, 1 << 10, 8 << 10, 11}, {32 << 10, 1 << 10, 16 << 10, 11}, {128 << 10, 1 << 10, 16 << 10, 11},
	} {
		b.Run(fmt.Sprintf("head=%dKiB/min=%dKiB/max=%dKiB/avg=%dKiB", p.bytes>>10, p.min>>10, p.max>>10, (1<<p.avgBits)>>10), func(b *testing.B) {
			headSizes = p
			for i := 0; i < b.N; i++ {
				var sum, most int64
				var keys int
				const seeds = 5
				for seed := uint64(1); seed <= seeds; seed++ {
					data := randBytes(rand.New(rand.NewPCG(seed, 77)), 32<<20)
					f, _, sto := newTestFS(b, Options{BlockSize: 32 << 10})
					c := measureInsert(b, f, sto, data, []byte("PREPEND010"), 0, "f")
					sum, most, keys = sum+c.added, max(most, c.added), keys+c.keys
				}
				b.ReportMetric(float64(sum)/seeds, "B-added-mean")
				b.ReportMetric(float64(most), "B-added-max")
				b.ReportMetric(float64(keys)/seeds, "keys")
				const files = 1000
				multi, over, chunks := 0, 0, 0
				for seed := uint64(0); seed < files; seed++ {
					r := rand.New(rand.NewPCG(seed, 9))
					data := randBytes(r, 160<<10)
					at := 0
					if seed%2 == 1 {
						at = r.IntN(64 << 10)
					}
					cp := append(append(append([]byte{}, data[:at]...), "PREPEND010"...), data[at:]...)
					orig, cut := cutChunks(b, data), cutChunks(b, cp)
					chunks += len(orig)
					added, k := 0, 0
					for h, l := range cut {
						if _, ok := orig[h]; !ok {
							added, k = added+l, k+1
						}
					}
					if k > 1 {
						multi++
					}
					if added > 26643 {
						over++
					}
				}
				b.ReportMetric(100*float64(multi)/files, "%more-than-1")
				b.ReportMetric(100*float64(over)/files, "%over-target")
				b.ReportMetric(float64(chunks)/files, "chunks/160KiB")
			}
		})
	}
}

// A file shorter than headFileMin is cut with the normal bounds alone: a
// 200 KiB file holds a few chunks, not some twenty head chunks; a file
// of headFileMin holds the head chunks.
func TestHeadChunksOnlyInLargeFiles(t *testing.T) {
	for _, tc := range []struct {
		size int
		head bool
	}{{40 << 10, false}, {200 << 10, false}, {int(headFileMin) - 1, false}, {int(headFileMin), true}, {4 << 20, true}} {
		data := randBytes(rand.New(rand.NewPCG(uint64(tc.size), 3)), tc.size)
		ch := newChunker(bytes.NewReader(data), 0)
		buf := make([]byte, chunkBufSize())
		small, total := 0, 0
		var end uint
		for {
			k, err := ch.Next(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Start != end {
				t.Fatalf("size %d: chunk at %d, want %d", tc.size, k.Start, end)
			}
			end = k.Start + k.Length
			total++
			if k.Start < uint(headSizes.bytes) && k.Length < uint(chunkSizes.min) {
				small++
			}
		}
		if end != uint(tc.size) {
			t.Fatalf("size %d: chunks end at %d", tc.size, end)
		}
		if got := small > 3; got != tc.head {
			t.Errorf("size %d: %d of %d chunks are head chunks under %d bytes; want head chunks: %v", tc.size, small, total, chunkSizes.min, tc.head)
		}
	}
}

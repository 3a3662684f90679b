package cowfs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// BenchmarkChunks compares 1 MiB and 4 KiB reads of a 32 MiB file in
// plain 32 KiB blocks, after rechunking into chunk references one per
// block (what stores held before extents), and after rechunking into
// extents, and measures rechunking.
func BenchmarkChunks(b *testing.B) {
	const bs = 32 << 10
	data := make([]byte, 32<<20)
	rand.NewChaCha8([32]byte{4}).Read(data)
	setup := func(b *testing.B, kind string) (*View, InodeID) {
		f, st, sto := newDiskFS(b, Options{BlockSize: bs})
		a, _ := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
		for off := 0; off < len(data); off += 1 << 20 {
			if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
				b.Fatal(err)
			}
		}
		var err error
		switch kind {
		case "chunked":
			_, err = sto.rechunkPlain(context.Background(), f.Top(), 1<<40)
		case "extents":
			_, err = sto.Rechunk(context.Background(), f.Top(), 1<<40)
		}
		if err != nil {
			b.Fatal(err)
		}
		// As GC leaves the store: the replaced references' versions and
		// tombstones compacted away, which reads would skip otherwise.
		if _, err := st.ReclaimSpace(context.Background()); err != nil {
			b.Fatal(err)
		}
		return f, a.Ino
	}
	for _, kind := range []string{"plain", "chunked", "extents"} {
		for _, size := range []int{1 << 20, 4 << 10} {
			b.Run(fmt.Sprintf("%s/read=%dKiB", kind, size>>10), func(b *testing.B) {
				f, ino := setup(b, kind)
				buf := make([]byte, size)
				r := rand.New(rand.NewPCG(1, 2))
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					off := (i * size) % len(data)
					if size < 1<<20 {
						off = r.IntN(len(data)/size) * size
					}
					if _, _, err := f.ReadAt(ino, buf, int64(off)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	b.Run("rechunk", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			f, _, sto := newDiskFS(b, Options{BlockSize: bs})
			a, _ := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
			f.WriteAt(a.Ino, data, 0)
			b.StartTimer()
			if _, err := sto.Rechunk(context.Background(), f.Top(), 1<<40); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkChunkSizes measures, per chunk size bounds, what a copy of a
// 32 MiB file with 10 bytes prepended adds to the store once both are
// rechunked (keys and values, logical bytes: its references and the one
// chunk that differs, whose size is a draw), the mean chunk size and the
// mean bytes of a block reference. It is how the chunk sizes were picked (docs/design.md).
func BenchmarkChunkSizes(b *testing.B) {
	const bs = 32 << 10
	data := make([]byte, 32<<20)
	rand.NewChaCha8([32]byte{5}).Read(data)
	defer func(old struct{ min, max, avgBits int }) { chunkSizes = old }(chunkSizes)
	for _, p := range []struct{ min, max, avgBits int }{
		{8 << 10, 128 << 10, 15}, {16 << 10, 256 << 10, 16}, {32 << 10, 512 << 10, 17},
	} {
		b.Run(fmt.Sprintf("avg=%dKiB", (1<<p.avgBits)>>10), func(b *testing.B) {
			chunkSizes = p
			for i := 0; i < b.N; i++ {
				ctx := context.Background()
				f, st, sto := newDiskFS(b, Options{BlockSize: bs})
				a, _ := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
				f.WriteAt(a.Ino, data, 0)
				rs, err := sto.Rechunk(ctx, f.Top(), 1<<40)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(rs.Bytes)/float64(rs.Chunks)/1024, "KiB/chunk")
				c, _ := f.Create(RootIno, "b", CreateGuarded, NewAttr{Mode: 0o644}, 0)
				f.WriteAt(c.Ino, append([]byte("PREPEND010"), data...), 0)
				if _, err := sto.Rechunk(ctx, f.Top(), 1<<40); err != nil {
					b.Fatal(err)
				}
				// What the copy adds: its references, and the chunks the
				// original does not name.
				orig := map[string]bool{}
				for _, v := range layerRefs(b, st, f.bs, f.Top(), a.Ino) {
					refHashes(v, func(h []byte) { orig[string(h)] = true })
				}
				refs := layerRefs(b, st, f.bs, f.Top(), c.Ino)
				var added, refBytes int64
				extra := map[string]bool{}
				for _, v := range refs {
					refBytes += int64(len(v))
					added += 26 + int64(len(v))
					refHashes(v, func(h []byte) {
						if !orig[string(h)] {
							extra[string(h)] = true
						}
					})
				}
				err = st.View(ctx, func(tx kv.Txn) error {
					for h := range extra {
						v, err := tx.Get(contentKey([]byte(h)))
						if err != nil {
							return err
						}
						added += 33 + int64(len(v))
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(added)/(1<<20), "MiB-added")
				b.ReportMetric(float64(refBytes)/float64(len(refs)), "ref-bytes")
			}
		})
	}
}

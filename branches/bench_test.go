package branches_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// reportLatency adds p50 and p99 metrics for the timed samples.
func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// populate creates n small files in main, 100 per directory.
func populate(b *testing.B, m *branches.Manager, n int) {
	b.Helper()
	fs, _, err := m.View("main")
	if err != nil {
		b.Fatal(err)
	}
	var dir cowfs.Attr
	for i := 0; i < n; i++ {
		if i%100 == 0 {
			if dir, err = fs.Mkdir(cowfs.RootIno, fmt.Sprintf("d%d", i/100), cowfs.NewAttr{Mode: 0o755}); err != nil {
				b.Fatal(err)
			}
		}
		a, err := fs.Create(dir.Ino, fmt.Sprintf("f%d", i), cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fs.WriteAt(a.Ino, []byte("some file content"), 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFork(b *testing.B) {
	for _, files := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			m := newManager(b)
			populate(b, m, files)
			ctx := context.Background()
			fs, _, _ := m.View("main")
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				// Dirty the parent so every fork freezes a layer.
				if _, err := fs.Mkdir(cowfs.RootIno, fmt.Sprintf("m%d", i), cowfs.NewAttr{Mode: 0o755}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if _, err := m.Fork(ctx, "main", fmt.Sprintf("b%d", i)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// BenchmarkCommit commits a child that wrote size bytes into an unchanged
// parent. sync=true is the product (the commit ends with an fsync);
// sync=false shows what the commit costs besides the fsync.
func BenchmarkCommit(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, size := range []int{1 << 10, 1 << 20, 100 << 20} {
			b.Run(fmt.Sprintf("sync=%v/size=%dKiB", sync, size>>10), func(b *testing.B) {
				benchCommit(b, size, branches.Options{NoLifecycleSync: !sync})
			})
		}
	}
}

func benchCommit(b *testing.B, size int, opts branches.Options) {
	{
		{
			m := newManagerOpts(b, opts)
			populate(b, m, 100)
			ctx := context.Background()
			data := make([]byte, 1<<20)
			rand.NewChaCha8([32]byte{1}).Read(data)
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				name := fmt.Sprintf("c%d", i)
				if _, err := m.Fork(ctx, "main", name); err != nil {
					b.Fatal(err)
				}
				fs, _, _ := m.View(name)
				a, err := fs.Create(cowfs.RootIno, fmt.Sprintf("big%d", i), cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < size; off += len(data) {
					n := min(len(data), size-off)
					data[0] = byte(i) // distinct content per round
					if _, err := fs.WriteAt(a.Ino, data[:n], int64(off)); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				t0 := time.Now()
				res, err := m.Commit(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				if !res.FastPath {
					b.Fatal("expected the fast path")
				}
			}
			b.StopTimer()
			reportLatency(b, lat)
		}
	}
}

func BenchmarkAbort(b *testing.B) {
	m := newManager(b)
	populate(b, m, 100)
	ctx := context.Background()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := fmt.Sprintf("a%d", i)
		if _, err := m.Fork(ctx, "main", name); err != nil {
			b.Fatal(err)
		}
		write(b, m, name, "x", "some change")
		b.StartTimer()
		t0 := time.Now()
		if _, err := m.Abort(ctx, name); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkRead reads 32 KiB at random offsets of a 4 MiB file that lies at
// the bottom of a stack of the given depth.
func BenchmarkRead(b *testing.B) {
	for _, depth := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			m := newManager(b)
			ctx := context.Background()
			fs, _, _ := m.View("main")
			a, err := fs.Create(cowfs.RootIno, "big", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
			if err != nil {
				b.Fatal(err)
			}
			data := make([]byte, 4<<20)
			rand.NewChaCha8([32]byte{2}).Read(data)
			if _, err := fs.WriteAt(a.Ino, data, 0); err != nil {
				b.Fatal(err)
			}
			for i := 1; i < depth; i++ {
				name := fmt.Sprintf("l%d", i)
				if _, err := m.Fork(ctx, "main", name); err != nil {
					b.Fatal(err)
				}
				write(b, m, name, fmt.Sprintf("other%d", i), "x")
				if _, err := m.Commit(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
			fs, _, _ = m.View("main")
			if got := len(fs.Stack()); got < depth {
				b.Fatalf("stack depth %d, want >= %d", got, depth)
			}
			buf := make([]byte, 32<<10)
			r := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := r.IntN(len(data) - len(buf))
				if _, _, err := fs.ReadAt(a.Ino, buf, int64(off)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFoldCheckpoints times fold passes that each fold one layer of
// main's stack while the store holds 10,000 checkpoint records (of another
// branch, which no fold touches): what a pass costs besides the fold
// itself grows with the records it reads.
func BenchmarkFoldCheckpoints(b *testing.B) {
	m := newManagerOpts(b, branches.Options{NoLifecycleSync: true})
	ctx := context.Background()
	write(b, m, "main", "f", "base")
	if _, err := m.Fork(ctx, "main", "side"); err != nil {
		b.Fatal(err)
	}
	write(b, m, "side", "s", "side")
	for i := 0; i < 10_000; i++ {
		if _, err := m.Checkpoint(ctx, "side", fmt.Sprintf("c%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	round := 0
	deepen := func(n int) {
		for ; n > 0; n-- {
			name := fmt.Sprintf("r%d", round)
			if _, err := m.Fork(ctx, "main", name); err != nil {
				b.Fatal(err)
			}
			write(b, m, name, fmt.Sprintf("f%d", round), "round")
			if _, err := m.Commit(ctx, name); err != nil {
				b.Fatal(err)
			}
			write(b, m, "main", fmt.Sprintf("p%d", round), "parent")
			round++
		}
		if _, err := m.Reclaim(ctx); err != nil {
			b.Fatal(err)
		}
	}
	deepen(10)
	if _, err := m.Fold(ctx); err != nil {
		b.Fatal(err)
	}
	var elapsed time.Duration
	folded := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		deepen(1)
		b.StartTimer()
		t0 := time.Now()
		n, err := m.Fold(ctx)
		elapsed += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		folded += n
	}
	b.StopTimer()
	if folded == 0 {
		b.Fatal("nothing folded")
	}
	b.ReportMetric(float64(elapsed.Microseconds())/float64(folded), "µs/fold")
}

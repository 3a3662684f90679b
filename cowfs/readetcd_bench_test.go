package cowfs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// BenchmarkReadBackends reads a 32 MiB file in 1 MiB READs (ReadInto),
// 8 at a time as a client's read-ahead sends them, with warm caches: on
// Badger with its content in the kv store, and on a 3-member etcd cluster
// (loopback) with the content in a block cache on local disk, as
// "serve --meta etcd://… --blocks s3://…" reads once its cache is warm.
// cpu-ns/op is the process's CPU time per READ (the etcd members run in
// this process too).
func BenchmarkReadBackends(b *testing.B) {
	b.Run("badger", func(b *testing.B) { benchmarkReadBackend(b, kvtest.NewStore(b), nil) })
	b.Run("etcd+cache", func(b *testing.B) {
		c := etcdtest.StartCluster(b, etcdtest.Options{})
		cache, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cache.Close() })
		benchmarkReadBackend(b, c.NewStore(b, etcdkv.Options{}), cache)
	})
}

func benchmarkReadBackend(b *testing.B, st kv.Store, bl blobs.Store) {
	const fileMiB, readers = 32, 8
	_, f := newTestTree(b, st, Options{Blobs: bl})
	a, err := f.Create(RootIno, "big", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range fileMiB {
		for j := range chunk {
			chunk[j] = byte(i*31 + j*7 + j>>15)
		}
		if _, err := f.WriteAt(a.Ino, chunk, int64(i)<<20); err != nil {
			b.Fatal(err)
		}
	}
	read := func(i int64, buf []byte) {
		n, _, err := f.ReadInto(a.Ino, uint64(i%fileMiB)<<20, len(buf), func(_ *Attr, n int) ([]byte, error) { return buf[:n], nil })
		if err != nil || n != len(buf) {
			b.Errorf("READ: %d bytes, %v", n, err)
		}
	}
	for i := range int64(fileMiB) { // warm
		read(i, chunk)
	}
	b.SetBytes(1 << 20)
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 := procCPU(b)
	b.ResetTimer()
	for range readers {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				read(i, buf)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(procCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// procCPU is the process's user and system CPU time so far.
func procCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(fmt.Errorf("getrusage: %w", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

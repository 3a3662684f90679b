package nfsserver

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkRead measures READ throughput of 1 MiB requests down ONE
// connection with 1 and 8 concurrent readers. Because requests are served
// concurrently and replies go out by XID, 8 readers should do clearly
// better than 1 (compare the MB/s of the two).
func BenchmarkRead(b *testing.B) {
	m := newManager(b, "")
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	fh, _, st := k.create(root, "big", 1, sa{})
	must(b, st, "create")
	const chunks = 64
	chunk := make([]byte, maxIO)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for i := range chunks {
		_, _, _, st := k.write(fh, uint64(i*maxIO), chunk, unstable)
		must(b, st, "write")
	}
	for _, readers := range []int{1, 8} {
		b.Run(fmt.Sprintf("size=1MiB/readers=%d", readers), func(b *testing.B) {
			b.SetBytes(maxIO)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						off := uint64(i%chunks) * maxIO
						d := c.nfs(6, authRoot, args(fh, off, uint32(maxIO)))
						if d.u32() != 0 {
							b.Error("READ failed")
							return
						}
						readPostOp(d)
						if n := d.u32(); n != maxIO {
							b.Errorf("READ returned %d bytes", n)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkGetattr measures small-request round trips, with 1 and 16
// requests in flight on one connection.
func BenchmarkGetattr(b *testing.B) {
	m := newManager(b, "")
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	root := c.mnt("/main")
	for _, inflight := range []int{1, 16} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			var next atomic.Int64
			var wg sync.WaitGroup
			for range inflight {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if c.nfs(1, authRoot, args(root)).u32() != 0 {
							b.Error("GETATTR failed")
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

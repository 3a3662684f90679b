package nfsserver

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRead measures READ throughput of 1 MiB requests down ONE
// connection with 1 and 8 concurrent readers. Because requests are served
// concurrently and replies go out by XID, 8 readers should do better than
// 1 (compare the MB/s of the two) whenever a READ waits for anything but
// the CPU. latency=2ms adds a 2 ms sleep to every READ in the server, as a
// storage read that misses the cache would: a server that answers one
// request per connection at a time gets no gain from 8 readers there.
func BenchmarkRead(b *testing.B) {
	for _, lat := range []time.Duration{0, 2 * time.Millisecond} {
		b.Run(fmt.Sprintf("latency=%v", lat), func(b *testing.B) { benchmarkRead(b, lat) })
	}
}

func benchmarkRead(b *testing.B, latency time.Duration) {
	m := newManager(b, "")
	_, addr := startServer(b, m, func(s *Server) {
		if latency > 0 {
			s.testHook = func(prog, proc uint32) {
				if prog == progNFS && proc == 6 {
					time.Sleep(latency)
				}
			}
		}
	})
	c := dialRaw(b, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	fh, _, st := k.create(root, "big", 1, sa{})
	must(b, st, "create")
	chunk := make([]byte, maxIO)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for i := range readChunks {
		_, _, _, st := k.write(fh, uint64(i*maxIO), chunk, unstable)
		must(b, st, "write")
	}
	for _, size := range []int{64 << 10, maxIO} {
		for _, readers := range []int{1, 8} {
			b.Run(fmt.Sprintf("size=%dKiB/readers=%d", size>>10, readers), func(b *testing.B) {
				benchmarkReaders(b, c, fh, size, readers)
			})
		}
	}
}

const readChunks = 64 // MiB in the benchmark file

// benchmarkReaders runs b.N READs of size bytes from readers goroutines
// sharing one connection.
func benchmarkReaders(b *testing.B, c *rawClient, fh []byte, size, readers int) {
	b.SetBytes(int64(size))
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
				off := uint64(i%readChunks) * maxIO
				d := c.nfs(6, authRoot, args(fh, off, uint32(size)))
				if d.u32() != 0 {
					b.Error("READ failed")
					return
				}
				readPostOp(d)
				if n := d.u32(); n != uint32(size) {
					b.Errorf("READ returned %d bytes", n)
					return
				}
			}
		}()
	}
	wg.Wait()
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

package kvtest

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// BenchOpener returns a fresh, empty store for one benchmark and registers
// its Close with b.Cleanup.
type BenchOpener func(b *testing.B) kv.Store

// RunBenchmarks measures the store's hot paths, each on a fresh store:
//
//   - Get/size=N: a View reading one of 1,000 keys with N-byte values;
//   - Set/size=N: an Update writing one key (a blind write);
//   - UpdateRMW: an Update reading a counter and writing it back (a
//     read-write transaction, the kind that carries conflict checks);
//   - Iterate/keys=100: a View iterating 100 keys with 100-byte values;
//   - SetParallel: blind-write Updates from GOMAXPROCS*4 goroutines.
func RunBenchmarks(b *testing.B, open BenchOpener) {
	for _, size := range []int{100, 4096} {
		b.Run(fmt.Sprintf("Get/size=%d", size), func(b *testing.B) {
			s := open(b)
			fill(b, s, "g/", 1000, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				err := s.View(bg, func(tx kv.Txn) error {
					return tx.GetFunc(fmt.Appendf(nil, "g/%05d", i%1000), func([]byte) error { return nil })
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("Set/size=%d", size), func(b *testing.B) {
			s := open(b)
			val := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Update(bg, func(tx kv.Txn) error { return tx.Set(fmt.Appendf(nil, "s/%08d", i), val) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("UpdateRMW", func(b *testing.B) {
		s := open(b)
		for i := 0; i < b.N; i++ {
			err := s.Update(bg, func(tx kv.Txn) error {
				n, err := getCounter(tx, "ctr")
				if err != nil {
					return err
				}
				return tx.Set([]byte("ctr"), fmt.Appendf(nil, "%d", n+1))
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Iterate/keys=100", func(b *testing.B) {
		s := open(b)
		fill(b, s, "i/", 100, 100)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			n := 0
			err := s.View(bg, func(tx kv.Txn) error {
				return tx.Iterate([]byte("i/"), nil, false, func(k, v []byte) (bool, error) { n++; return true, nil })
			})
			if err != nil || n != 100 {
				b.Fatalf("iterated %d keys: %v", n, err)
			}
		}
	})
	b.Run("SetParallel", func(b *testing.B) {
		s := open(b)
		val := make([]byte, 100)
		b.SetParallelism(4)
		var goroutines atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			g, i := goroutines.Add(1), 0
			for pb.Next() {
				i++
				if err := s.Update(bg, func(tx kv.Txn) error { return tx.Set(fmt.Appendf(nil, "p/%d/%d", g, i), val) }); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// fill writes n keys prefix%05d with size-byte values, 100 per transaction.
func fill(b *testing.B, s kv.Store, prefix string, n, size int) {
	b.Helper()
	val := make([]byte, size)
	for i := 0; i < n; i += 100 {
		err := s.Update(bg, func(tx kv.Txn) error {
			for j := i; j < min(i+100, n); j++ {
				if err := tx.Set(fmt.Appendf(nil, "%s%05d", prefix, j), val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

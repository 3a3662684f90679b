package kv_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// BenchmarkSync measures a durability point after one small transaction
// (a COMMIT after a write), on the disk of the test's temporary directory:
// value=256 and value=4096 stay in the memtable's log, value=16384 goes to
// the value log too (the store's value threshold is 8 KiB).
func BenchmarkSync(b *testing.B) {
	for _, size := range []int{256, 4096, 16384} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			ctx := context.Background()
			s, err := kv.OpenBadger(b.TempDir(), kv.BadgerOptions{GCInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprint(i)), make([]byte, size)) })
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

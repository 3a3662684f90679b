package kv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

func TestSuiteBadgerMemory(t *testing.T) {
	kvtest.RunSuite(t, func(t *testing.T) kv.Store { return kvtest.NewStore(t) })
}

func TestSuiteBadgerDisk(t *testing.T) {
	kvtest.RunSuite(t, func(t *testing.T) kv.Store { return kvtest.NewDiskStore(t) })
}

func BenchmarkBadger(b *testing.B) {
	kvtest.RunBenchmarks(b, func(b *testing.B) kv.Store { return kvtest.NewDiskStore(b) })
}

// TestInMemoryLargeValue: an in-memory store refuses a value that Badger
// would send to the value log it does not have, instead of crashing.
func TestInMemoryLargeValue(t *testing.T) {
	s := kvtest.NewStore(t)
	err := s.Update(context.Background(), func(tx kv.Txn) error { return tx.Set([]byte("big"), make([]byte, 1<<20)) })
	if !errors.Is(err, kv.ErrTxnTooBig) {
		t.Fatalf("1 MiB value in an in-memory store: %v, want ErrTxnTooBig", err)
	}
	err = s.Update(context.Background(), func(tx kv.Txn) error { return tx.Set([]byte("fits"), make([]byte, 1<<20-1)) })
	if err != nil {
		t.Fatalf("a value just under 1 MiB: %v", err)
	}
}

// TestSuiteLimited: the Limited wrapper passes the suite, its Limits case
// included, so tests that run code over it see etcd's bounds enforced.
func TestSuiteLimited(t *testing.T) {
	kvtest.RunSuite(t, func(t *testing.T) kv.Store {
		return kvtest.Limited(kvtest.NewStore(t), kv.Limits{Writes: 128, Reads: 128, Bytes: 1 << 20, OpBytes: 24})
	})
}

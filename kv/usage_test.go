package kv_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestIterateSizes: the sizes told without reading values are exact, for
// values in the tree and in the value log, whatever their length.
func TestIterateSizes(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := []int{0, 1, 100, 1023, 1024, 1025, 16383, 16384, 40000, 65536, 2 << 20}
	err = s.Update(ctx, func(tx kv.Txn) error {
		for i, n := range sizes {
			if err := tx.Set([]byte(fmt.Sprintf("v%02d-%s", i, make([]byte, i*7))), make([]byte, n)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(ctx, func(tx kv.Txn) error {
		if _, ok := tx.(kv.SizeIterator); !ok {
			t.Error("the Badger store's transactions do not tell sizes")
		}
		i := 0
		err := kv.IterateSizes(tx, []byte("v"), func(k []byte, size int64) (bool, error) {
			if size != int64(sizes[i]) {
				t.Errorf("value %d: size %d, want %d", i, size, sizes[i])
			}
			i++
			return true, nil
		})
		if i != len(sizes) {
			t.Errorf("%d keys, want %d", i, len(sizes))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestValueLogGarbage: deleted values count as value-log garbage until
// ReclaimSpace rewrites their logs away.
func TestValueLogGarbage(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, ValueLogFileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := s.(kv.GarbageEstimator)
	const n, size = 64, 64 << 10
	for i := 0; i < n; i++ {
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprintf("k%03d", i)), make([]byte, size)) }); err != nil {
			t.Fatal(err)
		}
	}
	before, err := g.ValueLogGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before > n*size/8 {
		t.Errorf("garbage %d with every value live, want little", before)
	}
	for i := 0; i < n; i += 2 {
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Delete([]byte(fmt.Sprintf("k%03d", i))) }); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := g.ValueLogGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if deleted < n/2*size {
		t.Errorf("garbage %d after deleting %d bytes of values", deleted, n/2*size)
	}
	if _, err := s.ReclaimSpace(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := g.ValueLogGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("garbage: %d live, %d after deletes, %d after ReclaimSpace", before, deleted, after)
	if after >= deleted/2 {
		t.Errorf("garbage %d after ReclaimSpace, want well under the %d before", after, deleted)
	}
}

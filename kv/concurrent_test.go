package kv_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestBadgerConcurrentGets checks kv.ConcurrentReader on Badger: a View's
// transaction allows concurrent GetFunc calls, and four goroutines reading
// values from the value log at once in one View (with the residency trims
// firing every 64 KiB of reads) each get the right bytes; an Update's
// transaction does not allow them. Run it with -race.
func TestBadgerConcurrentGets(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, TrimEvery: 64 << 10, TrimAbove: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const keys = 64
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 7}, 32<<10/3) }
	key := func(i int) []byte { return fmt.Appendf(nil, "k%03d", i) }
	if err := s.Update(ctx, func(tx kv.Txn) error {
		for i := range keys {
			if err := tx.Set(key(i), val(i)); err != nil {
				return err
			}
		}
		if c, ok := tx.(kv.ConcurrentReader); ok && c.ConcurrentGets() {
			t.Error("an Update's transaction allows concurrent reads")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err = s.View(ctx, func(tx kv.Txn) error {
		if c, ok := tx.(kv.ConcurrentReader); !ok || !c.ConcurrentGets() {
			t.Fatal("a View's transaction does not allow concurrent reads")
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for g := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range 8 {
					for i := g; i < keys; i += len(errs) {
						err := tx.GetFunc(key(i), func(v []byte) error {
							if !bytes.Equal(v, val(i)) {
								return fmt.Errorf("round %d: key %d: %d bytes, not the value set", r, i, len(v))
							}
							return nil
						})
						if err != nil {
							errs[g] = err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

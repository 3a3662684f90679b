package kv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// stores lists every Store implementation the suite runs against.
func stores(t *testing.T) map[string]kv.Store {
	open := func(dir string, inMem bool) kv.Store {
		s, err := kv.OpenBadger(dir, kv.BadgerOptions{InMemory: inMem, GCInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return map[string]kv.Store{
		"badger-disk":   open(t.TempDir(), false),
		"badger-memory": open("", true),
	}
}

func TestStoreSemantics(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			err := s.Update(ctx, func(tx kv.Txn) error {
				for i := 0; i < 10; i++ {
					if err := tx.Set([]byte(fmt.Sprintf("p/%02d", i)), []byte{byte(i)}); err != nil {
						return err
					}
				}
				return tx.Set([]byte("q/big"), make([]byte, 64<<10))
			})
			if err != nil {
				t.Fatal(err)
			}
			err = s.View(ctx, func(tx kv.Txn) error {
				if _, err := tx.Get([]byte("p/99")); !errors.Is(err, kv.ErrNotFound) {
					t.Errorf("missing key: %v", err)
				}
				if ok, _ := tx.Has([]byte("p/03")); !ok {
					t.Error("Has(p/03) = false")
				}
				v, err := tx.Get([]byte("q/big"))
				if err != nil || len(v) != 64<<10 {
					t.Errorf("big value: %d bytes, %v", len(v), err)
				}
				var keys []string
				err = tx.Iterate([]byte("p/"), []byte("p/05"), false, func(k, v []byte) (bool, error) {
					keys = append(keys, string(k))
					return len(keys) < 3, nil
				})
				if err != nil || fmt.Sprint(keys) != "[p/05 p/06 p/07]" {
					t.Errorf("iterate from p/05: %v %v", keys, err)
				}
				if err := tx.Set([]byte("x"), nil); !errors.Is(err, kv.ErrReadOnly) {
					t.Errorf("Set in View: %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// An error aborts the whole transaction.
			boom := errors.New("boom")
			err = s.Update(ctx, func(tx kv.Txn) error {
				tx.Set([]byte("p/00"), []byte("changed"))
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("Update error: %v", err)
			}
			s.View(ctx, func(tx kv.Txn) error {
				if v, _ := tx.Get([]byte("p/00")); len(v) != 1 {
					t.Errorf("aborted transaction left %q", v)
				}
				return nil
			})
			// Conflicting increments are retried, none lost.
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 25; i++ {
						err := s.Update(ctx, func(tx kv.Txn) error {
							v, err := tx.Get([]byte("ctr"))
							if errors.Is(err, kv.ErrNotFound) {
								v, err = []byte{0, 0}, nil
							}
							if err != nil {
								return err
							}
							n := int(v[0])<<8 | int(v[1]) + 1
							return tx.Set([]byte("ctr"), []byte{byte(n >> 8), byte(n)})
						})
						if err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			s.View(ctx, func(tx kv.Txn) error {
				v, _ := tx.Get([]byte("ctr"))
				if n := int(v[0])<<8 | int(v[1]); n != 200 {
					t.Errorf("counter = %d, want 200", n)
				}
				return nil
			})
			snap := s.NewSnapshot()
			s.Update(ctx, func(tx kv.Txn) error { return tx.Delete([]byte("p/01")) })
			if ok, _ := snap.Has([]byte("p/01")); !ok {
				t.Error("snapshot saw a later delete")
			}
			snap.Discard()
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestConcurrentSync: many concurrent Syncs all return, without error.
func TestConcurrentSync(t *testing.T) {
	ctx := context.Background()
	s := stores(t)["badger-disk"]
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprint("s", g, i)), []byte("v")) })
				if err := s.Sync(ctx); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSmallInMemoryStore(t *testing.T) {
	s, err := kv.OpenBadger("", kv.BadgerOptions{InMemory: true, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatalf("in-memory store with 4 MiB memtables: %v", err)
	}
	s.Close()
}

// TestLimitsBatch: Batch divides each bound by an item's cost and never
// returns less than one.
func TestLimitsBatch(t *testing.T) {
	l := kv.Limits{Writes: 128, Reads: 128, Bytes: 1000, OpBytes: 24}
	for _, c := range []struct{ writes, bytes, want int }{
		{3, 0, 42}, {1, 100, 10}, {3, 10, 42}, {0, 0, 128}, {200, 0, 1}, {1, 5000, 1},
	} {
		if got := l.Batch(c.writes, c.bytes); got != c.want {
			t.Errorf("Batch(%d, %d) = %d, want %d", c.writes, c.bytes, got, c.want)
		}
	}
}

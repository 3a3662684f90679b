package kv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestClosedStore: every call on a closed store fails with ErrClosed
// instead of crashing, and a second Close does nothing.
func TestClosedStore(t *testing.T) {
	ctx := context.Background()
	for name, mem := range map[string]bool{"disk": false, "memory": true} {
		t.Run(name, func(t *testing.T) {
			dir := ""
			if !mem {
				dir = t.TempDir()
			}
			s, err := kv.OpenBadger(dir, kv.BadgerOptions{InMemory: mem, GCInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("v")) }); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			calls := map[string]func() error{
				"Sync": func() error { return s.Sync(ctx) },
				"View": func() error { return s.View(ctx, func(kv.Txn) error { return nil }) },
				"Update": func() error {
					return s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("a"), []byte("b")) })
				},
				"Size":         func() error { _, err := s.Size(); return err },
				"ReclaimSpace": func() error { _, err := s.ReclaimSpace(ctx); return err },
				"Compact":      func() error { return s.Compact(ctx) },
				"Snapshot": func() error {
					snap := s.NewSnapshot()
					defer snap.Discard()
					_, err := snap.Get([]byte("k"))
					return err
				},
			}
			for call, fn := range calls {
				var err error
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s on a closed store panicked: %v", call, r)
						}
					}()
					err = fn()
				}()
				if !errors.Is(err, kv.ErrClosed) {
					t.Errorf("%s on a closed store: %v, want kv.ErrClosed", call, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

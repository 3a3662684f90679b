package kv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
)

// TestCloseIsBounded: when the memtable cannot be flushed (here: the store
// directory is gone), Badger retries forever; Close still returns, with
// ErrCloseTimedOut, so that a server asked to stop exits.
func TestCloseIsBounded(t *testing.T) {
	dir := t.TempDir()
	s, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1, Reserve: -1, CloseTimeout: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if !errors.Is(err, kv.ErrCloseTimedOut) {
			t.Fatalf("Close of a store whose directory is gone: %v, want ErrCloseTimedOut", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close of a store whose directory is gone has not returned after 2 minutes")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseOfAHealthyStoreIsClean: the bound changes nothing for a store
// that can flush.
func TestCloseOfAHealthyStoreIsClean(t *testing.T) {
	dir := t.TempDir()
	s, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1, Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1, Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get([]byte("k"))
		if err == nil && string(v) != "v" {
			err = errors.New("wrong value " + string(v))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCloseDuringUpdates: Updates that run while the store closes either
// commit or fail with ErrClosed; none sends on Badger's closed write
// channel (a data race under -race, and a panic when the send comes
// second), because Close waits for the Updates under way.
func TestCloseDuringUpdates(t *testing.T) {
	for round := 0; round < 20; round++ {
		s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, Reserve: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		errs := make(chan error, 8)
		started := make(chan struct{}, 8)
		for w := 0; w < 8; w++ {
			go func() {
				defer func() {
					if r := recover(); r != nil {
						errs <- fmt.Errorf("Update panicked during Close: %v", r)
					}
				}()
				for i := 0; ; i++ {
					err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprintf("k%d-%d", w, i)), []byte("v")) })
					if i == 0 {
						started <- struct{}{}
					}
					if errors.Is(err, kv.ErrClosed) {
						errs <- nil
						return
					}
					if err != nil {
						errs <- fmt.Errorf("Update during Close: %w", err)
						return
					}
				}
			}()
		}
		for w := 0; w < 8; w++ {
			<-started
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for w := 0; w < 8; w++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}

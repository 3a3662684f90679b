package kv_test

import (
	"context"
	"errors"
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

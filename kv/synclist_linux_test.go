package kv_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestSyncListsOnlyAfterNameChanges checks that Sync lists the store's
// directory again only when a name in it was created or removed since the
// last listing (the directory watch), and that a log file created in
// between is still fsynced by the next Sync.
func TestSyncListsOnlyAfterNameChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1, Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mu, synced := countFsyncs(s, filepath.Base, false)
	commitAndSync := func() {
		t.Helper()
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), make([]byte, 100)) }); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commitAndSync()
	n := kv.LogListings(s)
	for range 5 {
		commitAndSync()
	}
	if got := kv.LogListings(s) - n; got != 0 {
		t.Errorf("5 Syncs with no file created: %d listings, want 0", got)
	}
	// A new log, as Badger makes when it rotates: the next Sync must see
	// it (and fsync the directory that gained it).
	name := "999999.vlog"
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(synced)
	mu.Unlock()
	commitAndSync()
	if got := kv.LogListings(s) - n; got != 1 {
		t.Errorf("Sync after a log was created: %d listings, want 1", got)
	}
	mu.Lock()
	if synced[name] == 0 || synced[filepath.Base(dir)] == 0 {
		t.Errorf("Sync after %s was created fsynced %v, want it and the directory", name, synced)
	}
	mu.Unlock()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	commitAndSync()
	if got := kv.LogListings(s) - n; got != 2 {
		t.Errorf("Sync after a log was removed: %d listings in all, want 2", got)
	}
}

// TestSyncWithNothingWritten checks that a Sync when no transaction wrote
// since the last successful one fsyncs nothing, that the first Sync after
// opening always fsyncs (an earlier process's writes may not be on disk),
// that a write or a failed transaction makes the next Sync fsync again,
// and that a failed fsync still fails a Sync with nothing to write.
func TestSyncWithNothingWritten(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var fsyncs atomic.Int64
	var fail atomic.Bool
	kv.SetLogFsync(s, func(string) error {
		fsyncs.Add(1)
		if fail.Load() {
			return errors.New("injected")
		}
		return nil
	})
	sync := func(what string, wantFsync bool) {
		t.Helper()
		n := fsyncs.Load()
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := fsyncs.Load() > n; got != wantFsync {
			t.Errorf("%s: fsynced %v, want %v", what, got, wantFsync)
		}
	}
	sync("first Sync after opening", true)
	sync("Sync with nothing written", false)
	if err := s.View(ctx, func(tx kv.Txn) error { _, err := tx.Get([]byte("k")); return ignoreNotFound(err) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx kv.Txn) error { _, err := tx.Get([]byte("k")); return ignoreNotFound(err) }); err != nil {
		t.Fatal(err)
	}
	sync("Sync after transactions that only read", false)
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	sync("Sync after a write", true)
	sync("Sync again", false)
	boom := errors.New("boom")
	if err := s.Update(ctx, func(tx kv.Txn) error {
		if err := tx.Set([]byte("k2"), []byte("v")); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update: %v, want boom", err)
	}
	sync("Sync after a transaction that wrote and failed", true)
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("w")) }); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := s.Sync(ctx); !errors.Is(err, kv.ErrSyncFailed) {
		t.Fatalf("Sync with a failing fsync: %v, want ErrSyncFailed", err)
	}
	fail.Store(false)
	n := fsyncs.Load()
	if err := s.Sync(ctx); !errors.Is(err, kv.ErrSyncFailed) {
		t.Fatalf("Sync with nothing written after a failed fsync: %v, want ErrSyncFailed", err)
	}
	if fsyncs.Load() != n {
		t.Errorf("Sync after a failed fsync fsynced again")
	}
}

func ignoreNotFound(err error) error {
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	return err
}

package kv_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
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
	var mu sync.Mutex
	synced := map[string]int{}
	kv.SetLogFsync(s, func(path string) error {
		mu.Lock()
		synced[filepath.Base(path)]++
		mu.Unlock()
		return nil
	})
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

package kv_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// A process killed between creating a memtable's write-ahead log and
// sizing it leaves an empty .mem file. The store must open again, with
// everything it held.
func TestOpenAfterEmptyMemtableLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := kv.BadgerOptions{GCInterval: -1, Reserve: -1}
	s, err := kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "99999.mem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatalf("open after a crash left an empty memtable log: %v", err)
	}
	defer s.Close()
	err = s.View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get([]byte("k"))
		if err == nil && string(v) != "v" {
			t.Errorf("k = %q after reopening, want v", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

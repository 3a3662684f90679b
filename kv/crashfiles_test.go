package kv_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// A process killed between creating a memtable's write-ahead log or a
// value log and sizing it leaves an empty .mem or .vlog file. The store
// must open again, with everything it held.
func TestOpenAfterEmptyLogs(t *testing.T) {
	for _, name := range []string{"99999.mem", "99999.vlog"} {
		t.Run(name, func(t *testing.T) { testOpenAfterEmptyLog(t, name) })
	}
}

func testOpenAfterEmptyLog(t *testing.T, name string) {
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
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatalf("open after a crash left an empty %s: %v", name, err)
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

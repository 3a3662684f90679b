package kvtest

import (
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// NewStore opens an in-memory Badger store, closed when tb ends.
func NewStore(tb testing.TB) kv.Store {
	tb.Helper()
	s, err := kv.OpenBadger("", kv.BadgerOptions{InMemory: true, GCInterval: -1})
	if err != nil {
		tb.Fatalf("kvtest: open an in-memory Badger store: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// NewDiskStore opens a Badger store in a temporary directory, closed when
// tb ends.
func NewDiskStore(tb testing.TB) kv.Store {
	tb.Helper()
	s, err := kv.OpenBadger(tb.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		tb.Fatalf("kvtest: open a Badger store: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

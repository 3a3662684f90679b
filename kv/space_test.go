package kv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestReserve runs a store on a simulated disk whose free space the test
// sets, and checks when writes are refused, that reads go on, and that
// writes resume when space returns.
func TestReserve(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const reserve = 64 << 20
	var avail atomic.Uint64
	avail.Store(10 << 30)
	statfs := func(string) (uint64, error) { return avail.Load(), nil }
	opts := kv.BadgerOptions{Reserve: reserve, GCInterval: -1}
	s, err := kv.OpenBadgerWithStatfs(dir, opts, statfs)
	if err != nil {
		t.Fatal(err)
	}
	set := func(key string, n int) error {
		return s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(key), make([]byte, n)) })
	}
	get := func(key string) error {
		return s.View(ctx, func(tx kv.Txn) error { _, err := tx.Get([]byte(key)); return err })
	}
	if err := set("a", 64<<10); err != nil {
		t.Fatal(err)
	}
	sp, err := s.(kv.SpaceReporter).Space()
	if err != nil || sp.AvailBytes != 10<<30-reserve || sp.Reserve != reserve {
		t.Fatalf("Space() = %+v, %v; want the reserve subtracted", sp, err)
	}

	tests := []struct {
		name       string
		avail      uint64
		bigOK      bool // a 64 KiB write
		smallOK    bool // a 100-byte write
		readOnlyOK bool // an Update that only reads
		deletesOK  bool // deleting 4096 keys (more than a small write)
	}{
		{"plenty", 1 << 30, true, true, true, true},
		{"inside the reserve", reserve * 3 / 4, false, true, true, true},
		{"below half the reserve", reserve / 4, false, false, true, false},
		{"disk full", 0, false, false, true, false},
		{"space returns", 1 << 30, true, true, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			avail.Store(tc.avail)
			kv.ExpireSpaceCache(s)
			check := func(what string, err error, ok bool) {
				t.Helper()
				if ok && err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if !ok && !errors.Is(err, kv.ErrNoSpace) {
					t.Errorf("%s: %v, want ErrNoSpace", what, err)
				}
				if err != nil && (!strings.Contains(err.Error(), "free space") || strings.Count(err.Error(), "no space left") != 1) {
					t.Errorf("%s: the error does not say what to do: %v", what, err)
				}
			}
			check("big write", set("big-"+tc.name, 64<<10), tc.bigOK)
			check("small write", set("small-"+tc.name, 100), tc.smallOK)
			check("read-only update", s.Update(ctx, func(tx kv.Txn) error { _, err := tx.Get([]byte("a")); return err }), tc.readOnlyOK)
			check("big delete", s.Update(ctx, func(tx kv.Txn) error {
				for i := 0; i < 4096; i++ {
					if err := tx.Delete([]byte(fmt.Sprintf("gone-%s-%04d", tc.name, i))); err != nil {
						return err
					}
				}
				return nil
			}), tc.deletesOK)
			if err := get("a"); err != nil {
				t.Errorf("read: %v", err)
			}
			if !tc.bigOK {
				if err := get("big-" + tc.name); !errors.Is(err, kv.ErrNotFound) {
					t.Errorf("a refused write was stored: %v", err)
				}
			}
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Opening on a full disk gives a read-only store.
	avail.Store(1 << 20)
	s, err = kv.OpenBadgerWithStatfs(dir, opts, statfs)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	if err := get("a"); err != nil {
		t.Errorf("read after opening on a full disk: %v", err)
	}
	err = set("b", 10)
	if !errors.Is(err, kv.ErrNoSpace) || !strings.Contains(err.Error(), "restart") {
		t.Errorf("write to a store opened on a full disk: %v", err)
	}
	if err := s.Update(ctx, func(tx kv.Txn) error { _, err := tx.Get([]byte("a")); return err }); err != nil {
		t.Errorf("read-only update of a store opened on a full disk: %v", err)
	}
	if sp, err := s.(kv.SpaceReporter).Space(); err != nil || !sp.ReadOnly || sp.AvailBytes != 0 {
		t.Errorf("Space() = %+v, %v", sp, err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Errorf("Sync of a read-only store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	avail.Store(1 << 30)
	s, err = kv.OpenBadgerWithStatfs(dir, opts, statfs)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := set("b", 10); err != nil {
		t.Errorf("write after reopening with space: %v", err)
	}
}

// TestReserveRefusesNewStoreOnFullDisk checks that no store is created on
// a full disk (Badger would write its first logs at once).
func TestReserveRefusesNewStoreOnFullDisk(t *testing.T) {
	_, err := kv.OpenBadgerWithStatfs(t.TempDir(), kv.BadgerOptions{Reserve: 64 << 20}, func(string) (uint64, error) { return 1 << 20, nil })
	if !errors.Is(err, kv.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "free space") {
		t.Fatalf("creating a store on a full disk: %v", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1 << 10: "1 KiB", 512 << 20: "512 MiB", 3 << 29: "1.5 GiB"} {
		if got := kv.FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestReserveFloor: a reserve too small to hold the memtables waiting for
// their flush and what gc needs on a full disk is refused, with the
// smallest one that works.
func TestReserveFloor(t *testing.T) {
	if got := kv.MinReserve(kv.BadgerOptions{}); got != 32<<20 {
		t.Fatalf("MinReserve of the defaults = %d, want 32 MiB", got)
	}
	for _, tc := range []struct {
		reserve int64
		ok      bool
	}{
		{16 << 20, false},
		{32<<20 - 1, false},
		{32 << 20, true},
		{-1, true},
	} {
		s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{Reserve: tc.reserve, GCInterval: -1})
		if tc.ok {
			if err != nil {
				t.Fatalf("reserve %d: %v", tc.reserve, err)
			}
			s.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "at least 32 MiB") {
			if s != nil {
				s.Close()
			}
			t.Fatalf("reserve %d: %v, want a refusal naming 32 MiB", tc.reserve, err)
		}
	}
}

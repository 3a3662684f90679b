package kv_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

func gcValue(i int) []byte {
	v := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, 32<<10/3)
	binary.BigEndian.PutUint32(v, uint32(i))
	return v
}

// TestReclaimSpace: after most values are deleted, ReclaimSpace gives their
// disk space back while writers go on, and every live value survives a
// reopen.
//
// "young" keeps the whole tree in level 0; "tree" first writes 12 MiB of
// small values through 1 MiB memtables, so the tree has lower levels and
// ReclaimSpace flushes by filling the memtable.
func TestReclaimSpace(t *testing.T) {
	t.Run("young", func(t *testing.T) { testReclaimSpace(t, false) })
	t.Run("tree", func(t *testing.T) { testReclaimSpace(t, true) })
}

func testReclaimSpace(t *testing.T, tree bool) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := kv.WithValueLogFileSize(kv.BadgerOptions{GCInterval: -1}, 4<<20)
	if tree {
		opts.MemTableSize = 1 << 20
	}
	s, err := kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	small := bytes.Repeat([]byte("s"), 500)
	for i := 0; tree && i < 24000; i += 100 {
		err := s.Update(ctx, func(tx kv.Txn) error {
			for j := i; j < i+100; j++ {
				if err := tx.Set([]byte(fmt.Sprintf("s%06d", j)), small); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	const n = 1280 // 40 MiB of 32 KiB values
	for i := 0; i < n; i += 32 {
		err := s.Update(ctx, func(tx kv.Txn) error {
			for j := i; j < i+32; j++ {
				if err := tx.Set([]byte(fmt.Sprintf("v%05d", j)), gcValue(j)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Keep every tenth value.
	err = s.Update(ctx, func(tx kv.Txn) error {
		for j := 0; j < n; j++ {
			if j%10 != 0 {
				if err := tx.Delete([]byte(fmt.Sprintf("v%05d", j))); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Writers go on during the reclaim and never see an error.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprintf("w%d", i%100)), []byte("small")) })
			if err != nil {
				t.Errorf("write during ReclaimSpace: %v", err)
				return
			}
			writes.Add(1)
		}
	}()
	st, err := s.ReclaimSpace(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	live := int64(n/10) * 32 << 10
	t.Logf("disk %d -> %d bytes (%d rewrites), live values %d bytes, %d writes meanwhile",
		st.DiskBefore, st.DiskAfter, st.Rewrites, live, writes.Load())
	if st.DiskBefore < int64(n)*32<<10 {
		t.Fatalf("disk before %d bytes: the values were not on disk", st.DiskBefore)
	}
	// Live values, at most 1/(1-0.2) of them in partly collected logs,
	// one value log being written and Badger's tables and manifest.
	if tree {
		live += 24000 * 500 // the small values, in tables
	}
	if limit := live*5/4 + 4<<20 + 2<<20; st.DiskAfter > limit {
		t.Fatalf("disk after ReclaimSpace %d bytes, want at most %d", st.DiskAfter, limit)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(ctx, func(tx kv.Txn) error {
		for j := 0; j < n; j++ {
			v, err := tx.Get([]byte(fmt.Sprintf("v%05d", j)))
			switch {
			case j%10 != 0 && err != kv.ErrNotFound:
				return fmt.Errorf("deleted value %d: %v", j, err)
			case j%10 == 0 && (err != nil || !bytes.Equal(v, gcValue(j))):
				return fmt.Errorf("live value %d after reopen: %v", j, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReclaimSpaceInsideReserve: on a disk inside the free-space reserve,
// the deletes that free space pass and ReclaimSpace still gives it back
// (without its filler writes, which the reserve refuses).
func TestReclaimSpaceInsideReserve(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const reserve = 256 << 20
	var avail atomic.Uint64
	avail.Store(10 << 30)
	opts := kv.WithValueLogFileSize(kv.BadgerOptions{GCInterval: -1, Reserve: reserve}, 4<<20)
	s, err := kv.OpenBadgerWithStatfs(dir, opts, func(string) (uint64, error) { return avail.Load(), nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 640 // 20 MiB of 32 KiB values
	for i := 0; i < n; i += 32 {
		err := s.Update(ctx, func(tx kv.Txn) error {
			for j := i; j < i+32; j++ {
				if err := tx.Set([]byte(fmt.Sprintf("v%05d", j)), gcValue(j)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	avail.Store(reserve * 3 / 4)
	kv.ExpireSpaceCache(s)
	err = s.Update(ctx, func(tx kv.Txn) error {
		for j := 0; j < n; j++ {
			if err := tx.Delete([]byte(fmt.Sprintf("v%05d", j))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("deleting inside the reserve: %v", err)
	}
	st, err := s.ReclaimSpace(ctx)
	if err != nil {
		t.Fatalf("ReclaimSpace inside the reserve: %v", err)
	}
	if st.DiskAfter > st.DiskBefore/2 {
		t.Fatalf("inside the reserve, disk %d -> %d bytes: the deleted values stayed", st.DiskBefore, st.DiskAfter)
	}
	// With less free than a rewrite may take, it refuses and says why.
	avail.Store(4 << 20)
	kv.ExpireSpaceCache(s)
	if _, err := s.ReclaimSpace(ctx); err != nil && (!errors.Is(err, kv.ErrNoSpace) || !strings.Contains(err.Error(), "free space")) {
		t.Fatalf("ReclaimSpace on a full disk: %v", err)
	}
}

// TestReclaimSpaceOnFullDisk: with less free space than a rewrite of a
// whole value log may take, ReclaimSpace still gives back the logs that are
// (nearly) all garbage, since moving their few live values takes almost
// nothing; with less free space than even that, it refuses and says how
// much it needs, rather than let Badger fill the disk through its mappings.
func TestReclaimSpaceOnFullDisk(t *testing.T) {
	ctx := context.Background()
	var avail atomic.Uint64
	avail.Store(10 << 30)
	const reserve = 8 << 20
	opts := kv.WithValueLogFileSize(kv.BadgerOptions{GCInterval: -1, Reserve: reserve, MemTableSize: 1 << 20}, 4<<20)
	s, err := kv.OpenBadgerWithStatfs(t.TempDir(), opts, func(string) (uint64, error) { return avail.Load(), nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 512 // 16 MiB: four value logs
	for i := 0; i < n; i++ {
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprintf("v%05d", i)), gcValue(i)) }); err != nil {
			t.Fatal(err)
		}
	}
	err = s.Update(ctx, func(tx kv.Txn) error {
		for i := 0; i < n; i++ {
			if i%64 == 0 {
				continue // a few live values, to be moved
			}
			if err := tx.Delete([]byte(fmt.Sprintf("v%05d", i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Inside the reserve (writes of new data are refused), above half of
	// it, and below a value log and a quarter.
	avail.Store(9 << 19)
	kv.ExpireSpaceCache(s)
	st, err := s.ReclaimSpace(ctx)
	if err != nil {
		t.Fatalf("ReclaimSpace with 4.5 MiB free: %v", err)
	}
	if st.Rewrites == 0 || st.DiskAfter > st.DiskBefore-8<<20 {
		t.Fatalf("ReclaimSpace with 4.5 MiB free: %+v: the logs of garbage stayed", st)
	}
	err = s.View(ctx, func(tx kv.Txn) error {
		for i := 0; i < n; i += 64 {
			if v, err := tx.Get([]byte(fmt.Sprintf("v%05d", i))); err != nil || !bytes.Equal(v, gcValue(i)) {
				return fmt.Errorf("live value %d after the rewrites: %v", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	avail.Store(1 << 20)
	kv.ExpireSpaceCache(s)
	_, err = s.ReclaimSpace(ctx)
	if !errors.Is(err, kv.ErrNoSpace) || !strings.Contains(err.Error(), "free space on") {
		t.Fatalf("ReclaimSpace with 1 MiB free: %v, want a refusal that says what to do", err)
	}
	avail.Store(10 << 30)
	kv.ExpireSpaceCache(s)
	if _, err := s.ReclaimSpace(ctx); err != nil {
		t.Fatalf("ReclaimSpace once space returned: %v", err)
	}
}

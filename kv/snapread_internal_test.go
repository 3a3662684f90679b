package kv

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// TestViewsShareSnapshot: Views that start while nothing is written share
// one Badger transaction; a View that starts after a write returned sees
// it (a new transaction), while a View still running on the old one keeps
// its snapshot; the old transaction is discarded once its last View ends;
// a write retires the current transaction even when no View follows;
// after Close a View fails with ErrClosed.
func TestViewsShareSnapshot(t *testing.T) {
	ctx := context.Background()
	st, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*badgerStore)
	key := []byte("k")
	get := func(tx Txn) (string, error) {
		v, err := tx.Get(key)
		if errors.Is(err, ErrNotFound) {
			return "", nil
		}
		return string(v), err
	}
	set := func(v string) {
		t.Helper()
		if err := s.Update(ctx, func(tx Txn) error { return tx.Set(key, []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	set("1")

	// A long View holds the current transaction while two more start.
	held, release := make(chan *readSnap), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := s.View(ctx, func(tx Txn) error {
			held <- s.snaps.cur
			<-release
			// Its snapshot predates the write below.
			if v, err := get(tx); err != nil || v != "1" {
				t.Errorf("the held View reads %q, %v after a later write; want its snapshot's \"1\"", v, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}()
	first := <-held
	if err := s.View(ctx, func(Txn) error {
		if s.snaps.cur != first {
			t.Error("a View that started while nothing was written opened a transaction of its own")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	set("2")
	if err := s.View(ctx, func(tx Txn) error {
		if s.snaps.cur == first {
			t.Error("a View that started after a write shares the transaction from before it")
		}
		v, err := get(tx)
		if err == nil && v != "2" {
			t.Errorf("a View after the write reads %q, want \"2\"", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.snaps.mu.Lock()
	refs := first.refs
	s.snaps.mu.Unlock()
	if refs != 1 {
		t.Errorf("the replaced transaction has %d references while one View uses it, want 1", refs)
	}
	close(release)
	wg.Wait()
	s.snaps.mu.Lock()
	refs = first.refs
	s.snaps.mu.Unlock()
	if refs != 0 {
		t.Errorf("the replaced transaction has %d references after its last View, want 0 (discarded)", refs)
	}

	// A write retires the current transaction at once: an idle store
	// holds no snapshot older than its last write, which would keep
	// compaction and value-log GC from dropping what the write replaced.
	s.snaps.mu.Lock()
	second := s.snaps.cur
	s.snaps.mu.Unlock()
	if second == nil {
		t.Fatal("no current transaction after a View")
	}
	set("3")
	s.snaps.mu.Lock()
	cur, refs := s.snaps.cur, second.refs
	s.snaps.mu.Unlock()
	if cur != nil || refs != 0 {
		t.Errorf("after a write with no View running: current %p, old transaction %d references; want none and 0", cur, refs)
	}

	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.View(ctx, func(Txn) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("View after Close: %v, want ErrClosed", err)
	}
}

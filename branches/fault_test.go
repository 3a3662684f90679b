package branches_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// fullDisk wraps a store; while armed every write transaction fails as a
// full disk does, before anything is stored.
type fullDisk struct {
	kv.Store
	armed atomic.Bool
}

func (f *fullDisk) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if f.armed.Load() {
		return fmt.Errorf("%w: write /store/000001.vlog: no space left on device", kv.ErrNoSpace)
	}
	return f.Store.Update(ctx, fn)
}

func (f *fullDisk) Sync(ctx context.Context) error {
	if f.armed.Load() {
		return fmt.Errorf("%w: fsync", kv.ErrNoSpace)
	}
	return f.Store.Sync(ctx)
}

func TestFullDiskLosesNothing(t *testing.T) {
	ctx := context.Background()
	inner, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	st := &fullDisk{Store: inner}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	write(t, m, "main", "keep.txt", "precious")
	must(m.Fork(ctx, "main", "kid"))(t)
	write(t, m, "kid", "kid.txt", "kid data")

	st.armed.Store(true)
	fs, _, _ := m.View("main")
	a, err := fs.Lookup(1, "keep.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.WriteAt(a.Ino, []byte("XXXXXXXX"), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write on a full disk: %v, want ENOSPC", err)
	}
	if _, err := fs.Billy().Create("new.txt"); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("create on a full disk: %v, want ENOSPC", err)
	}
	if _, err := m.Fork(ctx, "main", "other"); !errors.Is(err, branches.ErrNoSpace) {
		t.Errorf("fork on a full disk: %v", err)
	}
	if _, err := m.Commit(ctx, "kid"); !errors.Is(err, branches.ErrNoSpace) {
		t.Errorf("commit on a full disk: %v", err)
	}
	if _, err := m.Abort(ctx, "kid"); !errors.Is(err, branches.ErrNoSpace) {
		t.Errorf("abort on a full disk: %v", err)
	}
	st.armed.Store(false)

	if got := read(t, m, "main", "keep.txt"); got != "precious" {
		t.Errorf("keep.txt after the failures: %q", got)
	}
	if got := read(t, m, "main", "new.txt"); got != "<missing>" {
		t.Errorf("new.txt: %q", got)
	}
	if got := read(t, m, "kid", "kid.txt"); got != "kid data" {
		t.Errorf("kid.txt: %q", got)
	}
	if _, err := m.Get(ctx, "other"); !errors.Is(err, branches.ErrNotFound) {
		t.Errorf("failed fork left a branch: %v", err)
	}
	// Everything works again once space is back.
	must(m.Commit(ctx, "kid"))(t)
	if got := read(t, m, "main", "kid.txt"); got != "kid data" {
		t.Errorf("kid.txt after commit: %q", got)
	}
}

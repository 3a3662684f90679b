package nfsserver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// crashAfter lets a number of write transactions through, then fails
// every later one: what a crash at that point leaves in the store.
type crashAfter struct {
	kv.Store
	allowed atomic.Int64 // negative: unlimited
}

func (s *crashAfter) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if s.allowed.Load() >= 0 && s.allowed.Add(-1) < 0 {
		return errors.New("injected crash")
	}
	return s.Store.Update(ctx, fn)
}

// TestWriteAndTruncateKillSetID: a WRITE or size SETATTR by a caller other
// than root clears setuid, and setgid on a group-executable file, in the
// transaction that changes the data, so no crash can leave new content
// with setuid set; root keeps the bits.
func TestWriteAndTruncateKillSetID(t *testing.T) {
	st := kvtest.NewStore(t)
	cs := &crashAfter{Store: st}
	cs.allowed.Store(-1)
	m, err := branches.Open(context.Background(), branches.Options{Store: cs, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	root := c.mnt("/main")
	rootK := c.as(authRoot)
	alice := c.as(authSys(1000, 1000, 1000))

	dir, _, s := rootK.mkdir(root, "d", 0o777)
	must(t, s, "mkdir")
	newFile := func(name string, mode uint32) []byte {
		t.Helper()
		fh, _, s := alice.create(dir, name, 1, sa{mode: u32p(0o644)})
		must(t, s, "create")
		must(t, alice.setattr(fh, sa{mode: u32p(mode)}), "chmod")
		if a, _ := alice.getattr(fh); a.mode != mode {
			t.Fatalf("%s: mode %o after chmod, want %o", name, a.mode, mode)
		}
		return fh
	}
	modeOf := func(fh []byte) uint32 {
		t.Helper()
		a, s := rootK.getattr(fh)
		must(t, s, "getattr")
		return a.mode
	}

	// A WRITE is one transaction: with every later one failing, the
	// bits are gone all the same.
	w := newFile("w", 0o6755)
	cs.allowed.Store(1)
	_, _, _, s = alice.write(w, 0, []byte("new content"), unstable)
	cs.allowed.Store(-1)
	must(t, s, "write")
	if got := modeOf(w); got != 0o755 {
		t.Errorf("WRITE by a user: mode %o, want 755", got)
	}
	wg := newFile("wg", 0o6745) // no group execute: setgid stays
	_, _, _, s = alice.write(wg, 0, []byte("x"), unstable)
	must(t, s, "write")
	if got := modeOf(wg); got != 0o2745 {
		t.Errorf("WRITE by a user, no group execute: mode %o, want 2745", got)
	}
	tr := newFile("t", 0o6755)
	cs.allowed.Store(1)
	s = alice.setattr(tr, sa{size: u64p(3)})
	cs.allowed.Store(-1)
	must(t, s, "truncate")
	if got := modeOf(tr); got != 0o755 {
		t.Errorf("truncate by a user: mode %o, want 755", got)
	}
	// So does a CREATE UNCHECKED that truncates an existing file (as an
	// open with O_TRUNC does).
	ct := newFile("ct", 0o6755)
	_, _, _, s = alice.write(ct, 0, []byte("content"), unstable)
	must(t, s, "write")
	must(t, alice.setattr(ct, sa{mode: u32p(0o6755)}), "chmod again")
	_, _, s = alice.create(dir, "ct", 0, sa{size: u64p(0)})
	must(t, s, "create unchecked, size 0")
	if a, _ := rootK.getattr(ct); a.mode != 0o755 || a.size != 0 {
		t.Errorf("CREATE UNCHECKED truncating by a user: mode %o size %d, want 755 and 0", a.mode, a.size)
	}
	// Root keeps them.
	r := newFile("r", 0o6755)
	_, _, _, s = rootK.write(r, 0, []byte("x"), unstable)
	must(t, s, "root write")
	must(t, rootK.setattr(r, sa{size: u64p(0)}), "root truncate")
	if got := modeOf(r); got != 0o6755 {
		t.Errorf("root's write and truncate: mode %o, want 6755", got)
	}
}

package nfsserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func authMachine(name string, uid uint32) auth {
	var e encoder
	e.u32(1) // stamp
	e.string(name)
	e.u32(uid)
	e.u32(uid)
	e.u32(0)
	return auth{flavor: authUnix, body: e.b}
}

// The mount table keeps the latest maxMounts entries.
func TestMountTableCap(t *testing.T) {
	_, addr := startServer(t, fakeStore(), nil)
	c := dialRaw(t, addr)
	const n = maxMounts + 6
	for i := range n {
		r := c.call(progMount, 3, 1, authMachine(fmt.Sprintf("host%04d", i), 0), args("/"))
		if r.stat != acceptSuccess || r.body.u32() != 0 {
			t.Fatalf("MNT %d failed", i)
		}
	}
	d := c.mount(2, nil)
	var got []string
	for d.bool() {
		got = append(got, d.string(maxMachine))
		d.string(maxMountPath)
	}
	if d.err != nil {
		t.Fatal(d.err)
	}
	if len(got) != maxMounts {
		t.Fatalf("DUMP lists %d mounts, want %d", len(got), maxMounts)
	}
	if got[0] != "host0006" || got[len(got)-1] != fmt.Sprintf("host%04d", n-1) {
		t.Fatalf("DUMP kept %s..%s, want the latest", got[0], got[len(got)-1])
	}
}

// BranchUsers counts a MNT without UMNT and recent use of the branch's
// handles over an open connection, not use through the export /.
func TestBranchUsers(t *testing.T) {
	m := newManager(t, "")
	if _, err := m.Fork(context.Background(), "main", "b1"); err != nil {
		t.Fatal(err)
	}
	s, addr := startServer(t, m, nil)

	// Through "/": not in use.
	viaRoot := dialRaw(t, addr)
	root := viaRoot.mnt("/")
	fh, _, st := viaRoot.as(authRoot).lookup(root, "b1")
	must(t, st, "LOOKUP b1 under /")
	_, st = viaRoot.as(authRoot).getattr(fh)
	must(t, st, "GETATTR")
	if u := s.BranchUsers("b1"); len(u) != 0 {
		t.Fatalf("in use through /: %v", u)
	}

	c := dialRaw(t, addr)
	fh = c.mnt("/b1")
	if u := s.BranchUsers("b1"); len(u) != 1 || u[0] != "testhost:/b1 mounted" {
		t.Fatalf("after MNT: %v", u)
	}
	if u := s.BranchUsers("main"); len(u) != 0 {
		t.Fatalf("main in use: %v", u)
	}
	_, st = c.as(authRoot).getattr(fh)
	must(t, st, "GETATTR")
	if r := c.call(progMount, 3, 3, authRoot, args("/b1")); r.stat != acceptSuccess {
		t.Fatal("UMNT failed")
	}
	if u := s.BranchUsers("b1"); len(u) != 0 {
		t.Fatalf("after UMNT: %v", u)
	}
	if !slices.Equal(s.Mounts(), []string{"testhost:/"}) {
		t.Fatalf("Mounts = %v", s.Mounts())
	}
	// Handles used without a mount entry (a client that mounted before a
	// restart): in use while the connection is open.
	_, st = c.as(authRoot).getattr(fh)
	must(t, st, "GETATTR")
	u := s.BranchUsers("b1")
	if len(u) != 1 || !strings.HasPrefix(u[0], c.nc.LocalAddr().String()+" used its files") {
		t.Fatalf("handles used: %v", u)
	}
	// Once the connection is closed, nobody uses b1.
	c.nc.Close()
	deadline := time.Now().Add(60 * time.Second)
	for len(s.BranchUsers("b1")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still in use after the connection closed: %v", s.BranchUsers("b1"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEndedBranchRecordsForgotten: a client that mounts branch after
// branch, uses each and never unmounts (nfs-cp, while the branches are
// committed or aborted with force) leaves no record per ended branch: the
// mount table and the connection's record of used branches stay at the
// size of a few live branches however many branches lived.
func TestEndedBranchRecordsForgotten(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, "")
	s, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	const rounds = 2000
	for i := range rounds {
		name := fmt.Sprintf("soak%d", i)
		if _, err := m.Fork(ctx, "main", name); err != nil {
			t.Fatal(err)
		}
		root := c.mnt("/" + name)
		if _, st := k.getattr(root); st != 0 {
			t.Fatalf("GETATTR of %s: %d", name, st)
		}
		if users := s.BranchUsers(name); len(users) != 2 {
			t.Fatalf("BranchUsers(%s) = %q, want its mount and its connection", name, users)
		}
		var err error
		if i%2 == 0 {
			_, err = m.Commit(ctx, name)
		} else {
			_, err = m.Abort(ctx, name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s.mounts.mu.Lock()
	mounts := len(s.mounts.m)
	s.mounts.mu.Unlock()
	s.mu.Lock()
	used := 0
	for sc := range s.conns {
		sc.used.Range(func(_, _ any) bool { used++; return true })
	}
	s.mu.Unlock()
	t.Logf("after %d branch lifetimes: %d mount entries, %d used-branch entries", rounds, mounts, used)
	if mounts > minPrune || used > minPrune {
		t.Fatalf("after %d branch lifetimes the server holds %d mount entries and %d used-branch entries; want at most %d each", rounds, mounts, used, minPrune)
	}
	// A branch forked under an ended branch's name has none of its users.
	if _, err := m.Fork(ctx, "main", "soak1"); err != nil {
		t.Fatal(err)
	}
	if users := s.BranchUsers("soak1"); len(users) != 0 {
		t.Fatalf("BranchUsers of a new branch named as an ended one = %q, want none", users)
	}
}

package branches_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
)

func TestMeta(t *testing.T) {
	ctx := context.Background()
	m := branchestest.NewManager(t, branches.Options{})
	for _, n := range []string{"a", "b"} {
		if _, err := m.Fork(ctx, "main", n); err != nil {
			t.Fatal(err)
		}
	}
	s := 0.5
	md, err := m.SetMeta(ctx, "a", branches.MetaUpdate{Labels: map[string]string{"task": "t1", "try": "2"}, Score: &s})
	if err != nil || md.Labels["task"] != "t1" || *md.Score != 0.5 {
		t.Fatalf("SetMeta: %+v, %v", md, err)
	}
	md, err = m.SetMeta(ctx, "a", branches.MetaUpdate{Labels: map[string]string{"try": ""}, ClearScore: true})
	if err != nil || len(md.Labels) != 1 || md.Score != nil {
		t.Fatalf("SetMeta removing a label and the score: %+v, %v", md, err)
	}
	if _, err := m.SetMeta(ctx, "a", branches.MetaUpdate{Labels: map[string]string{"bad key": "x"}}); !errors.Is(err, branches.ErrInvalidName) {
		t.Fatalf("bad label key: %v", err)
	}
	if _, err := m.SetMeta(ctx, "nosuch", branches.MetaUpdate{Score: &s}); !errors.Is(err, branches.ErrNotFound) {
		t.Fatalf("missing branch: %v", err)
	}
	all, err := m.Metas(ctx)
	if err != nil || len(all) != 1 || all["a"].Labels["task"] != "t1" {
		t.Fatalf("Metas: %+v, %v", all, err)
	}
	if _, err := m.SetMeta(ctx, "b", branches.MetaUpdate{LeaseMS: 1}); err != nil {
		t.Fatal(err)
	}
	aborted, err := m.ExpireLeases(ctx, time.Now().Add(time.Second))
	if err != nil || len(aborted) != 1 || aborted[0] != "b" {
		t.Fatalf("ExpireLeases: %v, %v; want [b]", aborted, err)
	}
	if _, err := m.Get(ctx, "b"); !errors.Is(err, branches.ErrNotFound) {
		t.Fatalf("b after its lease expired: %v, want aborted (not found)", err)
	}
	if _, err := m.Abort(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// The next sweep deletes the meta of gone branches.
	if _, err := m.ExpireLeases(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if all, err := m.Metas(ctx); err != nil || len(all) != 0 {
		t.Fatalf("Metas after aborts: %+v, %v", all, err)
	}
	// An unexpired lease is kept; a removed one does not expire.
	if _, err := m.Fork(ctx, "main", "c"); err != nil {
		t.Fatal(err)
	}
	m.SetMeta(ctx, "c", branches.MetaUpdate{LeaseMS: 60_000})
	if aborted, _ := m.ExpireLeases(ctx, time.Now()); len(aborted) != 0 {
		t.Fatalf("an unexpired lease aborted %v", aborted)
	}
	m.SetMeta(ctx, "c", branches.MetaUpdate{LeaseMS: -1})
	if aborted, _ := m.ExpireLeases(ctx, time.Now().Add(time.Hour)); len(aborted) != 0 {
		t.Fatalf("a removed lease aborted %v", aborted)
	}
}

// The root branch cannot be aborted, so it takes no lease; and a lease
// that cannot be honoured (written on main by an older version) does not
// keep other leases from expiring.
func TestLeaseOnRootBranch(t *testing.T) {
	ctx := context.Background()
	m := branchestest.NewManager(t, branches.Options{})
	if _, err := m.SetMeta(ctx, branches.MainBranch, branches.MetaUpdate{LeaseMS: 1000}); !errors.Is(err, branches.ErrReadOnly) {
		t.Fatalf("lease on main: %v, want ErrReadOnly", err)
	}
	if _, err := m.Fork(ctx, "main", "zz-attempt"); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute)
	for _, b := range []string{branches.MainBranch, "zz-attempt"} {
		if err := m.PutLease(ctx, b, past); err != nil {
			t.Fatal(err)
		}
	}
	aborted, err := m.ExpireLeases(ctx, time.Now())
	if err == nil {
		t.Fatal("ExpireLeases reported no error for the lease on main")
	}
	if len(aborted) != 1 || aborted[0] != "zz-attempt" {
		t.Fatalf("aborted %v, want [zz-attempt] despite main's lease", aborted)
	}
}

// A lease renewal does not wait for the lifecycle lock, which a long merge
// or diff holds; and the reaper checks the lease again before it aborts.
func TestLeaseRenewalDuringLongOperation(t *testing.T) {
	ctx := context.Background()
	m := branchestest.NewManager(t, branches.Options{})
	if _, err := m.Fork(ctx, "main", "att"); err != nil {
		t.Fatal(err)
	}
	if err := m.PutLease(ctx, "att", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	unlock := m.LockOps()
	renewed := make(chan error, 1)
	go func() {
		_, err := m.SetMeta(ctx, "att", branches.MetaUpdate{LeaseMS: 60_000})
		renewed <- err
	}()
	select {
	case err := <-renewed:
		if err != nil {
			unlock()
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		unlock()
		t.Fatal("a lease renewal waited for the lifecycle lock")
	}
	// The reaper, once it has the lock, sees the renewed lease.
	expired := make(chan []string, 1)
	go func() {
		a, _ := m.ExpireLeases(ctx, time.Now())
		expired <- a
	}()
	unlock()
	if a := <-expired; len(a) != 0 {
		t.Fatalf("aborted %v after the lease was renewed", a)
	}
	if in, err := m.Get(ctx, "att"); err != nil || in.State != branches.StateLive {
		t.Fatalf("att after the reaper: %+v, %v", in, err)
	}
}

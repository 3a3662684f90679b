package etcdtest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestServerLease: CommitLeased applies its writes only when every
// condition holds, leased keys go with the lease (and the next commit
// takes a new one), LeaseDeadline renews, and an Update that requires a
// key (kv.CommitChecker) commits only while it exists.
func TestServerLease(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	const prefix = "/sl/"
	st := c.NewStore(t, etcdkv.Options{Prefix: prefix})
	sl := c.NewCoord(t, etcdkv.Options{Prefix: prefix}).ServerLease(0)
	get := func(k string) ([]byte, bool) {
		t.Helper()
		var v []byte
		err := st.View(ctx, func(tx kv.Txn) error {
			var err error
			v, err = tx.Get([]byte(k))
			return err
		})
		if errors.Is(err, kv.ErrNotFound) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return v, true
	}
	lease, ok, err := sl.CommitLeased(ctx, []kv.Cond{{Key: []byte("m"), Absent: true}, {Key: []byte("i/"), Prefix: true, Absent: true}},
		[]kv.Op{{Key: []byte("i/1"), Value: []byte("x"), Leased: true}, {Key: []byte("r"), Value: []byte("v1")}})
	if err != nil || !ok {
		t.Fatalf("first commit: ok %v, err %v", ok, err)
	}
	// Each condition refuses on its own.
	for _, cond := range []kv.Cond{
		{Key: []byte("i/"), Prefix: true, Absent: true},
		{Key: []byte("r"), Absent: true},
		{Key: []byte("r"), Value: []byte("v0")},
		{Key: []byte("nothing"), Value: []byte("")},
	} {
		_, ok, err := sl.CommitLeased(ctx, []kv.Cond{cond}, []kv.Op{{Key: []byte("r"), Value: []byte("bad")}})
		if err != nil || ok {
			t.Fatalf("condition %+v: ok %v, err %v; want refused", cond, ok, err)
		}
	}
	if v, _ := get("r"); string(v) != "v1" {
		t.Fatalf("r = %q after refused commits", v)
	}
	if _, ok, err := sl.CommitLeased(ctx, []kv.Cond{{Key: []byte("r"), Value: []byte("v1")}}, []kv.Op{{Key: []byte("r"), Delete: true}}); err != nil || !ok {
		t.Fatalf("delete on value: ok %v, err %v", ok, err)
	}
	if _, ok := get("r"); ok {
		t.Fatal("r not deleted")
	}
	before := time.Now()
	dl, err := sl.LeaseDeadline(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Before(before.Add(etcdkv.DefaultServerLeaseTTL-time.Second)) || dl.After(time.Now().Add(etcdkv.DefaultServerLeaseTTL)) {
		t.Fatalf("deadline %v from a renewal at %v of a %v lease", dl, before, etcdkv.DefaultServerLeaseTTL)
	}
	// An Update requiring i/1 commits while it exists.
	require := func() error {
		return st.Update(ctx, func(tx kv.Txn) error {
			if err := tx.(kv.CommitChecker).RequireExists([]byte("i/1")); err != nil {
				return err
			}
			return tx.Set([]byte("ref"), []byte("1"))
		})
	}
	if err := require(); err != nil {
		t.Fatal(err)
	}
	if err := sl.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := get("i/1"); ok {
		t.Fatal("a leased key outlived its revoked lease")
	}
	if _, err := sl.LeaseDeadline(ctx, lease); !errors.Is(err, kv.ErrLeaseLost) {
		t.Fatalf("LeaseDeadline of a revoked lease: %v", err)
	}
	if err := require(); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("an Update requiring a key that is gone: %v, want kv.ErrConflict", err)
	}
	// The next commit runs under a new lease.
	lease2, ok, err := sl.CommitLeased(ctx, nil, []kv.Op{{Key: []byte("i/2"), Value: []byte("x"), Leased: true}})
	if err != nil || !ok || lease2 == lease {
		t.Fatalf("commit after the revoke: lease %x (was %x), ok %v, err %v", lease2, lease, ok, err)
	}
	if _, ok := get("i/2"); !ok {
		t.Fatal("i/2 not put")
	}
}

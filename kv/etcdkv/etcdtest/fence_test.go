package etcdtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestFence: an Update under a fence (kv.WithFence) commits only while
// the fence's key is bound to its lease, checked in the commit's own Txn:
// once another lease holds the key it fails with kv.ErrFenced and writes
// nothing, though the writer's fence still holds the old token; with the
// key gone it fails with kv.ErrUnavailable (its owner may claim it
// again); a suspended fence refuses with kv.ErrUnavailable and a dropped
// one with kv.ErrFenced, before sending anything. Errors name the fenced
// thing, not its key.
func TestFence(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/fence/"}
	st := c.NewStore(t, o)
	co := c.NewCoord(t, o)
	owner := []byte("O\x00\x00\x01")
	la, err := co.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := la.Claim(ctx, owner, []byte("a")); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	var f kv.Fence
	f.Hold(kv.FenceToken{Key: owner, Lease: la.ID(), Name: `branch "x"`})
	fctx := kv.WithFence(ctx, &f)
	put := func(ctx context.Context, v string) error {
		return st.Update(ctx, func(tx kv.Txn) error {
			if _, err := tx.Get([]byte("data")); err != nil && !errors.Is(err, kv.ErrNotFound) {
				return err
			}
			return tx.Set([]byte("data"), []byte(v))
		})
	}
	get := func() string {
		var v []byte
		if err := st.View(ctx, func(tx kv.Txn) error { v, err = tx.Get([]byte("data")); return err }); err != nil {
			t.Fatal(err)
		}
		return string(v)
	}
	if err := put(fctx, "owner"); err != nil {
		t.Fatalf("a fenced write by the owner: %v", err)
	}
	// The key goes with a's lease, and b claims it.
	if err := la.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if err := put(fctx, "late"); !errors.Is(err, kv.ErrUnavailable) || errors.Is(err, kv.ErrFenced) {
		t.Fatalf("a fenced write after the owner key went: %v, want kv.ErrUnavailable", err)
	}
	lb, err := co.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := lb.Claim(ctx, owner, []byte("b")); !ok || err != nil {
		t.Fatalf("claim by b: %v %v", ok, err)
	}
	if err := put(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	err = put(fctx, "late")
	if !errors.Is(err, kv.ErrFenced) {
		t.Fatalf("a fenced write after another lease took the owner key: %v, want kv.ErrFenced", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `branch "x"`) || strings.Contains(msg, "\x00") {
		t.Fatalf("the fenced error names the key, not the branch: %q", msg)
	}
	if got := get(); got != "b" {
		t.Fatalf("data after the fenced write: %q, want b's", got)
	}
	f.Suspend()
	if err := put(fctx, "late"); !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("a write under a suspended fence: %v, want kv.ErrUnavailable", err)
	}
	f.Drop()
	if err := put(fctx, "late"); !errors.Is(err, kv.ErrFenced) {
		t.Fatalf("a write under a dropped fence: %v, want kv.ErrFenced", err)
	}
	f.Hold(kv.FenceToken{Key: owner, Lease: lb.ID(), Name: `branch "x"`})
	if err := put(fctx, "b again"); err != nil {
		t.Fatalf("a write under the new owner's token: %v", err)
	}
	if got := get(); got != "b again" {
		t.Fatalf("data: %q", got)
	}
}

// TestClaimErrorNamesKey: a claim the cluster cannot answer (two of its
// three members are down) fails with an error that renders the key
// (O+<hex id>), without its raw bytes.
func TestClaimErrorNamesKey(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	co := c.NewCoord(t, etcdkv.Options{Prefix: "/claimerr/", RequestTimeout: time.Second})
	l, err := co.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	c.Stop(1)
	defer c.Restart(t)
	_, _, err = l.Claim(ctx, []byte("O\x00\x00\x00\x00\x00\x00\x00\x07"), []byte("v"))
	if err == nil {
		t.Fatal("a claim without quorum succeeded")
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\x00\x07") || !strings.Contains(msg, "O+0000000000000007") {
		t.Fatalf("the claim's error shows the raw key, or not the key at all: %q", msg)
	}
	if !errors.Is(err, kv.ErrUnavailable) && !errors.Is(err, kv.ErrUnknownOutcome) {
		t.Fatalf("a claim without quorum: %v, want kv.ErrUnavailable or kv.ErrUnknownOutcome (NFS3ERR_JUKEBOX)", err)
	}
	// With no member at all, granting a lease (what a server's first
	// leased write does) is unavailable too, not an unknown error (EIO).
	c.Stop(2)
	if _, err := co.Grant(ctx, 10*time.Second); !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("a grant with every member down: %v, want kv.ErrUnavailable", err)
	}
	_, _, err = co.ServerLease(0).CommitLeased(ctx, nil, []kv.Op{{Key: []byte("k"), Value: []byte("v"), Leased: true}})
	if !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("a first leased transaction with every member down: %v, want kv.ErrUnavailable", err)
	}
}

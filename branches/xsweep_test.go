package branches_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestSharedGCKeepsOtherServersBranches runs two Managers on one etcd
// prefix and one blob store, each with its own lease, as two servers
// would. B opened before A forked x and wrote into it, and follows no
// watch (as `branchnfs gc` run on a store other servers serve): its GC
// must take the live branches from the stored records, not from what it
// holds, or it deletes x's layers and blocks. Afterwards x reads back
// through a third Manager, and what only a branch A aborted used is gone
// from the blob store.
func TestSharedGCKeepsOtherServersBranches(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	const prefix = "/sharedgc/"
	bucket := blobs.NewMem()
	open := func() *branches.Manager {
		m, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, etcdkv.Options{Prefix: prefix}), ReclaimDelay: -1,
			FS: cowfs.Options{Blobs: bucket, Leases: c.NewCoord(t, etcdkv.Options{Prefix: prefix}).ServerLease(0)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a := open()
	b := open()
	r := rand.New(rand.NewPCG(9, 9))
	write := func(m *branches.Manager, branch string, n int) []byte {
		t.Helper()
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		v, _, err := m.View(branch)
		if err != nil {
			t.Fatal(err)
		}
		f, err := v.Create(cowfs.RootIno, "f", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.WriteAt(f.Ino, data, 0); err != nil {
			t.Fatal(err)
		}
		return data
	}
	must(a.Fork(ctx, "main", "x"))(t)
	want := write(a, "x", 200<<10)
	must(a.Fork(ctx, "main", "gone"))(t)
	gone := write(a, "gone", 32<<10)
	must(a.Abort(ctx, "gone"))(t)

	if _, err := b.GC(ctx); err != nil {
		t.Fatalf("GC on B: %v", err)
	}
	v, _, err := open().View("x")
	if err != nil {
		t.Fatalf("x after B's GC: %v", err)
	}
	fa, err := v.Lookup(cowfs.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want)+1)
	n, _, err := v.ReadAt(fa.Ino, got, 0)
	if err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("x's file after B's GC: %d bytes, equal %v, err %v", n, bytes.Equal(got[:n], want), err)
	}
	if ok, err := bucket.Has(ctx, blobs.Sum(gone)); err != nil || ok {
		t.Fatalf("the block only an aborted branch used is still stored (%v, %v)", ok, err)
	}
}

package branches_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestSharedGCKeepsMergingLayer runs two Managers on one etcd prefix and
// one blob store, as two servers would. A's commit of x into main takes
// the merge path and stalls in its merge past the grace a garbage layer
// gets (set to zero here: the stall outlasted it), while B runs gc twice.
// B must not delete the layer A merges into: the commit then completes,
// and every file x wrote reads back from main through a third Manager.
func TestSharedGCKeepsMergingLayer(t *testing.T) {
	defer branches.SetSharedLayerGrace(0)()
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	const prefix = "/mergegc/"
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
	r := rand.New(rand.NewPCG(3, 7))
	write := func(m *branches.Manager, branch, name string, n int) []byte {
		t.Helper()
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		v, _, err := m.View(branch)
		if err != nil {
			t.Fatal(err)
		}
		f, err := v.Create(cowfs.RootIno, name, cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.WriteAt(f.Ino, data, 0); err != nil {
			t.Fatal(err)
		}
		return data
	}
	must(a.Fork(ctx, "main", "x"))(t)
	want := map[string][]byte{"m": write(a, "main", "m", 40<<10)} // main changed: no fast path
	for i := range 3 {
		name := fmt.Sprintf("f%d", i)
		want[name] = write(a, "x", name, 100<<10)
	}
	gcs := 0
	a.SetMergeHook(func() {
		for range 2 {
			if _, err := b.GC(ctx); err != nil {
				t.Errorf("GC on B during A's merge: %v", err)
			}
			gcs++
		}
	})
	res, err := a.Commit(ctx, "x")
	if err != nil {
		t.Fatalf("commit of x while B ran gc: %v", err)
	}
	if res.FastPath || gcs != 2 {
		t.Fatalf("the commit took the fast path (%v) or B's gc ran %d times, not during a merge", res.FastPath, gcs)
	}
	v, _, err := open().View("main")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range want {
		fa, err := v.Lookup(cowfs.RootIno, name)
		if err != nil {
			t.Fatalf("main/%s after the commit: %v", name, err)
		}
		got := make([]byte, len(data)+1)
		n, _, err := v.ReadAt(fa.Ino, got, 0)
		if err != nil || !bytes.Equal(got[:n], data) {
			t.Fatalf("main/%s after the commit: %d of %d bytes, equal %v, err %v", name, n, len(data), bytes.Equal(got[:n], data), err)
		}
	}
	// Once x is committed, its merge layer is main's and a later gc on
	// B keeps it too.
	if _, err := b.GC(ctx); err != nil {
		t.Fatal(err)
	}
	v, _, err = open().View("main")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Lookup(cowfs.RootIno, "f0"); err != nil {
		t.Fatalf("main/f0 after a later gc: %v", err)
	}
}

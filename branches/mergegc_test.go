package branches_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
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
	ss := newSharedStore(t, "/mergegc/")
	open := ss.open
	a := open()
	b := open()
	must(a.Fork(ctx, "main", "x"))(t)
	want := map[string][]byte{"m": gcData(31, 40<<10)} // main changed: no fast path
	gcWrite(t, a, "main", "m", want["m"])
	for i := range 3 {
		name := fmt.Sprintf("f%d", i)
		want[name] = gcData(uint64(32+i), 100<<10)
		gcWrite(t, a, "x", name, want[name])
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
	c := open()
	for name, data := range want {
		if got := gcRead(t, c, "main", name); !bytes.Equal(got, data) {
			t.Fatalf("main/%s after the commit: %d of %d bytes, equal %v", name, len(got), len(data), bytes.Equal(got, data))
		}
	}
	// Once x is committed, its merge layer is main's and a later gc on
	// B keeps it too.
	if _, err := b.GC(ctx); err != nil {
		t.Fatal(err)
	}
	v, _, err := open().View("main")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Lookup(cowfs.RootIno, "f0"); err != nil {
		t.Fatalf("main/f0 after a later gc: %v", err)
	}
}

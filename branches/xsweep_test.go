package branches_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
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
	ss := newSharedStore(t, "/sharedgc/")
	open := ss.open
	a := open()
	b := open()
	must(a.Fork(ctx, "main", "x"))(t)
	want := gcData(41, 200<<10)
	gcWrite(t, a, "x", "f", want)
	must(a.Fork(ctx, "main", "gone"))(t)
	gone := gcData(42, 32<<10)
	gcWrite(t, a, "gone", "f", gone)
	must(a.Abort(ctx, "gone"))(t)

	if _, err := b.GC(ctx); err != nil {
		t.Fatalf("GC on B: %v", err)
	}
	if got := gcRead(t, open(), "x", "f"); !bytes.Equal(got, want) {
		t.Fatalf("x's file after B's GC: %d bytes, equal %v", len(got), bytes.Equal(got, want))
	}
	if ok, err := ss.bucket.Has(ctx, blobs.Sum(gone)); err != nil || ok {
		t.Fatalf("the block only an aborted branch used is still stored (%v, %v)", ok, err)
	}
}

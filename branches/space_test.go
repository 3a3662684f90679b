package branches_test

import (
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// TestSpace: unique bytes follow what only a branch's own layers
// reference, aborting a branch moves its unique bytes into the
// reclaimable figure, and gc takes that figure back to nothing.
func TestSpace(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	st, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1, GCAfterSwept: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()
	gcWrite(t, m, "main", "base", gcData(1, size))
	for _, b := range []string{"a", "b"} {
		if _, err := m.Fork(ctx, "main", b); err != nil {
			t.Fatal(err)
		}
	}
	gcWrite(t, m, "a", "own", gcData(2, 2*size))
	gcWrite(t, m, "b", "own", gcData(3, size))
	// The same bytes in two branches belong to neither alone.
	gcWrite(t, m, "a", "same", gcData(4, size))
	gcWrite(t, m, "b", "same", gcData(4, size))
	if _, err := m.Fork(ctx, "a", "a1"); err != nil {
		t.Fatal(err)
	}

	u, err := m.UniqueBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// a's own file is in a layer a1 reaches too: shared now.
	want := map[string]int64{"main": 0, "a": 0, "b": size, "a1": 0}
	for name, n := range want {
		if u[name] != n {
			t.Errorf("unique bytes of %s = %d, want %d (all: %v)", name, u[name], n, u)
		}
	}
	if len(u) != len(want) {
		t.Errorf("unique bytes for %v, want the live branches %v", u, want)
	}
	if _, err := m.Abort(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	rep, err := m.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.UniqueBytes["a"] != 2*size || rep.UniqueBytes["b"] != size {
		t.Errorf("after aborting a1, unique bytes %v, want a %d and b %d", rep.UniqueBytes, 2*size, size)
	}
	if rep.ContentBytes != 5*size {
		t.Errorf("content bytes %d, want %d", rep.ContentBytes, 5*size)
	}
	if rep.Branches[branches.StateLive] != 3 || rep.Branches[branches.StateAborted] != 1 {
		t.Errorf("branches by state %v, want 3 live and 1 aborted", rep.Branches)
	}
	if rep.DiskBytes < 5*size {
		t.Errorf("disk bytes %d, less than the %d of content", rep.DiskBytes, 5*size)
	}
	if rep.Reclaimable.UnreferencedContent != 0 {
		t.Errorf("unreferenced content %d before any abort of data", rep.Reclaimable.UnreferencedContent)
	}

	if _, err := m.Abort(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rep, err = m.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	r := rep.Reclaimable
	if r.UnreferencedContent != 2*size {
		t.Errorf("after aborting a, unreferenced content %d, want its unique %d", r.UnreferencedContent, 2*size)
	}
	if r.DeadLayers == 0 || r.DeadLayerKeys == 0 || r.DeadLayerBytes == 0 {
		t.Errorf("after aborting a, dead layers %d (%d keys, %d bytes), want a's", r.DeadLayers, r.DeadLayerKeys, r.DeadLayerBytes)
	}
	if rep.UniqueBytes["b"] != 2*size {
		t.Errorf("after aborting a, b's unique bytes %d, want %d (its own file and the one it shared with a)", rep.UniqueBytes["b"], 2*size)
	}
	if r.Total < r.UnreferencedContent+r.DeadLayerBytes {
		t.Errorf("total %d below its parts %+v", r.Total, r)
	}

	if _, err := m.GC(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = m.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	r = rep.Reclaimable
	if r.UnreferencedContent != 0 || r.DeadLayers != 0 {
		t.Errorf("after gc, reclaimable %+v, want no content and no layer", r)
	}
	if r.ValueLogGarbage < 0 || r.ValueLogGarbage > size {
		t.Errorf("after gc, value-log garbage %d, want known and under %d (logs at most a fifth garbage)", r.ValueLogGarbage, size)
	}
}

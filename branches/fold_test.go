package branches_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// TestFoldDeepStack builds a deep stack with fork/commit rounds, folds it,
// and checks the tree, a checkpoint and a live child are unchanged.
func TestFoldDeepStack(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "big", string(make([]byte, 70000)))
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("r%d", i)
		must(m.Fork(ctx, "main", name))(t)
		write(t, m, name, fmt.Sprintf("d/f%d", i), fmt.Sprint("round ", i))
		write(t, m, name, "shared", fmt.Sprint("v", i))
		must(m.Commit(ctx, name))(t)
		if i == 10 {
			must(m.Checkpoint(ctx, "main", "mid"))(t)
		}
		write(t, m, "main", fmt.Sprintf("p%d", i), "parent")
	}
	must(m.Fork(ctx, "main", "kid"))(t)
	write(t, m, "kid", "kidfile", "kid")
	must(m.Reclaim(ctx))(t)
	fs, _, _ := m.View("main")
	before := len(fs.Stack())
	n := must(m.Fold(ctx))(t)
	after := len(fs.Stack())
	if n == 0 || after >= before {
		t.Fatalf("fold: %d layers folded, depth %d -> %d", n, before, after)
	}
	t.Logf("folded %d layers: depth %d -> %d", n, before, after)
	must(m.Reclaim(ctx))(t)
	for i := 0; i < 20; i++ {
		if got := read(t, m, "main", fmt.Sprintf("d/f%d", i)); got != fmt.Sprint("round ", i) {
			t.Fatalf("d/f%d = %q", i, got)
		}
		if got := read(t, m, "main", fmt.Sprintf("p%d", i)); got != "parent" {
			t.Fatalf("p%d = %q", i, got)
		}
	}
	if got := read(t, m, "main", "shared"); got != "v19" {
		t.Fatalf("shared = %q", got)
	}
	if got := read(t, m, "kid", "kidfile"); got != "kid" {
		t.Fatalf("kid = %q", got)
	}
	if got := read(t, m, "main", "kidfile"); got != "<missing>" {
		t.Fatalf("kidfile leaked: %q", got)
	}
	if got := len(read(t, m, "main", "big")); got != 70000 {
		t.Fatalf("big has %d bytes", got)
	}
	must(m.Commit(ctx, "kid"))(t)
	if got := read(t, m, "main", "kidfile"); got != "kid" {
		t.Fatalf("kid commit after fold: %q", got)
	}
	if err := m.Restore(ctx, "main", "mid"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, m, "main", "shared"); got != "v10" {
		t.Fatalf("restored shared = %q", got)
	}
	if got := read(t, m, "main", "d/f11"); got != "<missing>" {
		t.Fatalf("restored d/f11 = %q", got)
	}
}

// TestFoldKeepsForkBase: once the parent moved away from a child's fork
// base (a restore), the base's only referrer is the child's own chain; a
// fold must still not copy the child's changes into it, or the commit
// would find nothing to merge.
func TestFoldKeepsForkBase(t *testing.T) {
	ctx := context.Background()
	m := newManagerOpts(t, branches.Options{FoldDepth: 1})
	write(t, m, "main", "old", "old")
	must(m.Checkpoint(ctx, "main", "early"))(t)
	write(t, m, "main", "mid", "mid")
	must(m.Fork(ctx, "main", "kid"))(t)
	write(t, m, "kid", "kidfile", "kid")
	must(m.Checkpoint(ctx, "kid", "k1"))(t) // freezes the kid's layer over its base
	write(t, m, "kid", "kid2", "kid2")
	if err := m.Restore(ctx, "main", "early"); err != nil {
		t.Fatal(err)
	}
	must(m.Reclaim(ctx))(t)
	must(m.Fold(ctx))(t)
	must(m.Reclaim(ctx))(t)
	d := must(m.Diff(ctx, "kid"))(t)
	if len(d.Changes) != 2 {
		t.Fatalf("kid's diff after fold: %+v", d.Changes)
	}
	must(m.Commit(ctx, "kid"))(t)
	for p, want := range map[string]string{"old": "old", "mid": "<missing>", "kidfile": "kid", "kid2": "kid2"} {
		if got := read(t, m, "main", p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
}

// TestFoldCheckpointIndex: a fold pass re-points the checkpoints of the
// layers it folds away without decoding the other checkpoint records
// (they come from an in-memory index), and the index agrees with the
// records after folds, after a reclamation pass deletes a dead branch's
// records, and after a reopen (it is rebuilt from the records).
func TestFoldCheckpointIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (kv.Store, *branches.Manager) {
		st, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		return st, m
	}
	st, m := open()
	agree := func(when string, want int) {
		t.Helper()
		n, err := m.CheckpointIndexAgrees(ctx)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if n != want {
			t.Fatalf("%s: %d checkpoint records, want %d", when, n, want)
		}
	}
	must(m.Fork(ctx, "main", "side"))(t)
	for i := 0; i < 40; i++ {
		write(t, m, "side", fmt.Sprintf("s%d", i), "side")
		must(m.Checkpoint(ctx, "side", fmt.Sprintf("s%d", i)))(t)
	}
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("r%d", i)
		must(m.Fork(ctx, "main", name))(t)
		write(t, m, name, fmt.Sprintf("f%d", i), fmt.Sprint("round ", i))
		must(m.Commit(ctx, name))(t)
		write(t, m, "main", fmt.Sprintf("p%d", i), "parent")
		if i%4 == 3 {
			must(m.Checkpoint(ctx, "main", fmt.Sprintf("c%d", i)))(t)
		}
	}
	must(m.Reclaim(ctx))(t) // the committed rounds' layers refer to main's
	agree("before folding", 45)
	before := must(m.CheckpointLayers(ctx))(t)
	decodes := m.CheckpointDecodes()
	folded := must(m.Fold(ctx))(t)
	if folded == 0 {
		t.Fatal("nothing folded")
	}
	after := must(m.CheckpointLayers(ctx))(t)
	moved := 0
	for k, l := range before {
		if after[k] != l {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("the folds re-pointed no checkpoint: the test does not exercise re-pointing")
	}
	// Each fold decodes at most the records it re-points: main's five
	// at most, never side's forty.
	if d := m.CheckpointDecodes() - decodes; d > int64(5*folded) {
		t.Fatalf("%d folds decoded %d checkpoint records", folded, d)
	}
	agree("after folding", 45)
	if err := m.Restore(ctx, "main", "c7"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, m, "main", "f7"); got != "round 7" {
		t.Fatalf("restored f7 = %q", got)
	}
	if got := read(t, m, "main", "p8"); got != "<missing>" {
		t.Fatalf("restored p4 = %q", got)
	}
	must(m.Abort(ctx, "side"))(t)
	must(m.Reclaim(ctx))(t)
	agree("after reclaiming side's checkpoints", 5)
	m.Close()
	st.Close()
	st, m = open()
	defer func() { m.Close(); st.Close() }()
	agree("after a reopen", 5)
}

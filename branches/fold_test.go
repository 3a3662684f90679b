package branches_test

import (
	"context"
	"fmt"
	"testing"
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

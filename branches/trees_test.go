package branches_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestPatchSince: a patch is measured from the fork, or from a
// checkpoint of the branch with since; a checkpoint the branch was
// restored past is refused with the way out; main has no fork point and
// no patch; the trees leave GC free to run once closed.
func TestPatchSince(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	if _, err := m.Fork(ctx, "main", "b"); err != nil {
		t.Fatal(err)
	}
	write(t, m, "b", "x", "x\n")
	if _, err := m.Checkpoint(ctx, "b", "cp1"); err != nil {
		t.Fatal(err)
	}
	write(t, m, "b", "y", "y\n")
	if _, err := m.Checkpoint(ctx, "b", "cp2"); err != nil {
		t.Fatal(err)
	}
	patch := func(since string) string {
		t.Helper()
		var buf bytes.Buffer
		if _, err := m.Patch(ctx, "b", since, &buf); err != nil {
			t.Fatalf("patch since %q: %v", since, err)
		}
		return buf.String()
	}
	if p := patch(""); !strings.Contains(p, "b/x") || !strings.Contains(p, "b/y") {
		t.Fatalf("patch since the fork:\n%s", p)
	}
	if p := patch("cp1"); strings.Contains(p, "b/x") || !strings.Contains(p, "b/y") {
		t.Fatalf("patch since cp1:\n%s", p)
	}
	if err := m.Restore(ctx, "b", "cp1"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := m.Patch(ctx, "b", "cp2", &buf); err == nil || !strings.Contains(err.Error(), "restored") {
		t.Fatalf("patch since a checkpoint restored past: %v", err)
	}
	if _, err := m.Patch(ctx, "b", "nosuch", &buf); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("patch since a missing checkpoint: %v", err)
	}
	if _, err := m.Patch(ctx, "main", "", &buf); err != nil || buf.Len() != 0 {
		t.Fatalf("patch of main: %v %q", err, buf.String())
	}
	// Two trees at once, then GC once they are closed.
	t1, err := m.Trees(ctx, "b", "")
	if err != nil {
		t.Fatal(err)
	}
	t2, err := m.Trees(ctx, "b", "")
	if err != nil {
		t.Fatal(err)
	}
	t1.Close()
	t2.Close()
	t2.Close() // idempotent
	if _, err := m.GC(ctx); err != nil {
		t.Fatal(err)
	}
}

package branches_test

import (
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

func TestSourceDir(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	if d, err := m.SourceDir(ctx); err != nil || d != "" {
		t.Fatalf("source of a store never imported: %q, %v", d, err)
	}
	if err := m.SetSourceDir(ctx, "relative/dir"); err == nil {
		t.Fatal("a relative source folder was accepted")
	}
	if err := m.SetSourceDir(ctx, "/home/u/repo/"); err != nil {
		t.Fatal(err)
	}
	if d, err := m.SourceDir(ctx); err != nil || d != "/home/u/repo" {
		t.Fatalf("source %q, %v", d, err)
	}
}

// TestCommitKeepSiblings: a commit with KeepSiblings leaves the parent's
// other children live, seeing the parent as at their fork, and their own
// commit then merges with it (a path both changed is a conflict).
func TestCommitKeepSiblings(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "a", "base a")
	write(t, m, "main", "b", "base b")
	for _, n := range []string{"agent", "agent2", "update"} {
		if _, err := m.Fork(ctx, "main", n); err != nil {
			t.Fatal(err)
		}
	}
	write(t, m, "update", "a", "from the folder")
	res, err := m.CommitWith(ctx, "update", branches.CommitOptions{KeepSiblings: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Invalidated) != 0 {
		t.Fatalf("invalidated %v", res.Invalidated)
	}
	if got := read(t, m, "main", "a"); got != "from the folder" {
		t.Fatalf("main's a: %q", got)
	}
	if got := read(t, m, "agent", "a"); got != "base a" {
		t.Fatalf("the agent sees %q, not its snapshot", got)
	}
	write(t, m, "agent", "b", "agent's b")
	if _, err := m.Commit(ctx, "agent"); err != nil {
		t.Fatalf("the agent's commit after the update: %v", err)
	}
	if a, b := read(t, m, "main", "a"), read(t, m, "main", "b"); a != "from the folder" || b != "agent's b" {
		t.Fatalf("main after both: a %q, b %q", a, b)
	}
	// The plain commit of the agent invalidated its sibling, as always.
	if _, err := m.Commit(ctx, "agent2"); err == nil {
		t.Fatal("agent2 committed after its sibling's commit")
	}
}

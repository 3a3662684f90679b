package branches_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestReclaimerFoldsCommittedLayers: every commit of a branch stacks its
// layer on main. The reclaimer's run after a burst of commits (one
// ReclaimDelay after the first of them) folds main's stack back to
// FoldDepth, however many committed: main keeps no layer per committed
// branch, and lookups in it do not slow down with their number. It runs
// as a user who is not root, as the server does.
func TestReclaimerFoldsCommittedLayers(t *testing.T) {
	testbin.Unprivileged(t, "TestReclaimerFoldsCommittedLayers", reclaimerFoldsCommittedLayers)
}

func reclaimerFoldsCommittedLayers(t *testing.T) {
	ctx := context.Background()
	m := newManager(t) // no background reclaimer: the test runs it
	const commits = 100
	for i := range commits {
		name := fmt.Sprintf("c%d", i)
		if _, err := m.Fork(ctx, branches.MainBranch, name); err != nil {
			t.Fatal(err)
		}
		write(t, m, name, fmt.Sprintf("f%d", i), "data")
		if _, err := m.Commit(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	depth := func() int {
		v, _, err := m.View(branches.MainBranch)
		if err != nil {
			t.Fatal(err)
		}
		return len(v.Stack())
	}
	before := depth()
	if before <= commits/2 {
		t.Fatalf("main's stack is %d deep after %d commits: the test set-up is wrong", before, commits)
	}
	m.RunReclaimer(ctx)
	fd := branches.Options{}
	fd.EnsureDefaults()
	if after := depth(); after > fd.FoldDepth {
		t.Fatalf("after %d commits and one run of the reclaimer main's stack is %d deep (%d before), want at most FoldDepth %d", commits, after, before, fd.FoldDepth)
	}
	for i := range commits {
		if got := read(t, m, branches.MainBranch, fmt.Sprintf("f%d", i)); got != "data" {
			t.Fatalf("f%d after the folds = %q", i, got)
		}
	}
}

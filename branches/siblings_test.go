package branches_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestCommitWithManySiblings: a commit invalidates 200 live siblings (and
// a sibling's child) in one small transaction, on a store that takes
// etcd's 128 writes per transaction: every one answers invalidated at
// once, List and Space show them so, and so does a Manager opened again
// on the store.
func TestCommitWithManySiblings(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), etcdLimits)
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		must(m.Fork(ctx, "main", fmt.Sprintf("s%03d", i)))(t)
	}
	must(m.Fork(ctx, "s007", "grandchild"))(t)
	must(m.Fork(ctx, "main", "winner"))(t)
	write(t, m, "winner", "f", "winner's")
	res, err := m.Commit(ctx, "winner")
	if err != nil {
		t.Fatalf("commit with %d live siblings on a store of 128 writes per transaction: %v", n, err)
	}
	if len(res.Invalidated) != n+1 {
		t.Fatalf("commit invalidated %d branches, want %d", len(res.Invalidated), n+1)
	}
	check := func(m *branches.Manager, when string) {
		t.Helper()
		for _, name := range []string{"s000", "s007", "s199", "grandchild"} {
			_, _, err := m.View(name)
			var ie *branches.InvalidatedError
			if !errors.As(err, &ie) || !strings.Contains(ie.By, "commit of winner into main") {
				t.Errorf("%s: view of %s: %v, want invalidated by the commit of winner", when, name, err)
			}
		}
		list, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		states := map[branches.State]int{}
		for _, in := range list {
			states[in.State]++
		}
		if states[branches.StateInvalidated] != n+1 || states[branches.StateLive] != 1 {
			t.Errorf("%s: list shows %v, want %d invalidated and main live", when, states, n+1)
		}
		sp, err := m.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Branches[branches.StateInvalidated] != n+1 || sp.Branches[branches.StateLive] != 1 {
			t.Errorf("%s: space counts %v, want %d invalidated and main live", when, sp.Branches, n+1)
		}
		if got := read(t, m, "main", "f"); got != "winner's" {
			t.Errorf("%s: main's f = %q", when, got)
		}
	}
	check(m, "after the commit")
	// A later commit into main leaves them invalidated by the first.
	must(m.Fork(ctx, "main", "second"))(t)
	write(t, m, "second", "g", "second's")
	must(m.Commit(ctx, "second"))(t)
	check(m, "after a second commit")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	check(m2, "after reopening")
	// A branch forked after the commit is live.
	must(m2.Fork(ctx, "main", "later"))(t)
	if _, _, err := m2.View("later"); err != nil {
		t.Errorf("a branch forked after the commit: %v", err)
	}
}

// TestFirstCommitWinsAcrossManagers: two Managers over one store (as two
// servers over one etcd cluster would be; here one Badger store, whose
// transactions detect read-write conflicts as etcdkv's do) commit sibling
// branches at once, on the fast path and on the merge path. Exactly one
// commit wins; the other gets an *InvalidatedError naming it (or, if it
// lost while freezing the parent, kv.ErrConflict), and its branch's
// changes reach the parent in no part.
func TestFirstCommitWinsAcrossManagers(t *testing.T) {
	for _, merge := range []bool{false, true} {
		t.Run(fmt.Sprintf("merge=%v", merge), func(t *testing.T) {
			ctx := context.Background()
			st := kvtest.NewStore(t)
			m1, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer m1.Close()
			must(m1.Fork(ctx, "main", "a"))(t)
			must(m1.Fork(ctx, "main", "b"))(t)
			for i := range 20 {
				write(t, m1, "a", fmt.Sprintf("a%02d", i), "from a")
				write(t, m1, "b", fmt.Sprintf("b%02d", i), "from b")
			}
			if merge {
				write(t, m1, "main", "m", "main's")
			}
			m2, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			var wg sync.WaitGroup
			var errA, errB error
			wg.Add(2)
			go func() { defer wg.Done(); _, errA = m1.Commit(ctx, "a") }()
			go func() { defer wg.Done(); _, errB = m2.Commit(ctx, "b") }()
			wg.Wait()
			if (errA == nil) == (errB == nil) {
				t.Fatalf("commits of a and b: %v and %v, want exactly one to win", errA, errB)
			}
			winner, loser, lerr := "a", "b", errB
			if errA != nil {
				winner, loser, lerr = "b", "a", errA
			}
			var ie *branches.InvalidatedError
			if errors.As(lerr, &ie) {
				if ie.Branch != loser || !strings.Contains(ie.By, "commit of "+winner) {
					t.Errorf("loser's error %v, want %s invalidated by the commit of %s", lerr, loser, winner)
				}
			} else if !errors.Is(lerr, kv.ErrConflict) {
				t.Errorf("loser's error %v, want an *InvalidatedError or kv.ErrConflict", lerr)
			}
			// A third Manager reads the store as a restarted server would.
			m3, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer m3.Close()
			for i := range 20 {
				if got := read(t, m3, "main", fmt.Sprintf("%s%02d", winner, i)); got != "from "+winner {
					t.Errorf("main's %s%02d = %q, want the winner's", winner, i, got)
				}
				if got := read(t, m3, "main", fmt.Sprintf("%s%02d", loser, i)); got != "<missing>" {
					t.Errorf("main's %s%02d = %q: the loser's commit was applied", loser, i, got)
				}
			}
			if merge {
				if got := read(t, m3, "main", "m"); got != "main's" {
					t.Errorf("main's m = %q", got)
				}
			}
			if _, _, err := m3.View(loser); !errors.Is(err, branches.ErrInvalidated) {
				t.Errorf("reopened: %s: %v, want invalidated", loser, err)
			}
		})
	}
}

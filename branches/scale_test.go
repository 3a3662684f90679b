package branches_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// TestGoneViewsReleased runs fork/write/commit-or-abort rounds, with a
// nested branch now and then, and checks the Manager keeps views of live
// branches only, while every gone branch's id and view still answer stale.
func TestGoneViewsReleased(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	type gone struct {
		id branches.BranchID
		fs *cowfs.View
	}
	var old []gone
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("b%d", i)
		in := must(m.Fork(ctx, "main", name))(t)
		write(t, m, name, fmt.Sprintf("f%d", i), "data")
		fs, _, err := m.View(name)
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, gone{in.ID, fs})
		switch i % 4 {
		case 0:
			must(m.Commit(ctx, name))(t)
		case 1:
			// Abort takes the descendants along.
			kid := must(m.Fork(ctx, name, name+"-kid"))(t)
			kfs, _, _ := m.View(name + "-kid")
			old = append(old, gone{kid.ID, kfs})
			must(m.Abort(ctx, name))(t)
		default:
			must(m.Abort(ctx, name))(t)
		}
	}
	all, goneViews := m.Views()
	if goneViews != 0 || all != 1 {
		t.Fatalf("Manager holds %d branches and %d views of gone branches; want 1 (main) and 0", all, goneViews)
	}
	// The store still knows them all.
	infos, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[branches.State]int{}
	for _, in := range infos {
		states[in.State]++
		if in.Name != "main" && (in.Parent == "" || in.Depth == 0) {
			t.Errorf("List: %s has parent %q, depth %d", in.Name, in.Parent, in.Depth)
		}
	}
	if want := map[branches.State]int{branches.StateLive: 1, branches.StateCommitted: 10, branches.StateAborted: 40}; !maps.Equal(states, want) {
		t.Errorf("List states = %v, want %v", states, want)
	}
	for _, g := range old {
		if _, _, err := m.ViewByID(g.id); !errors.Is(err, branches.ErrStale) {
			t.Errorf("ViewByID(%d) of a gone branch: %v, want ErrStale", g.id, err)
		}
		if _, err := g.fs.GetAttr(cowfs.RootIno); !errors.Is(err, syscall.ESTALE) {
			t.Errorf("GetAttr on the released view of branch %d: %v, want ESTALE", g.id, err)
		}
	}
	before := m.Metrics()
	st, err := m.Reclaim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := m.Metrics()
	if st.Layers == 0 || after.ReclaimedLayers-before.ReclaimedLayers != int64(st.Layers) ||
		after.ReclaimedBlocks-before.ReclaimedBlocks != int64(st.Blocks) {
		t.Fatalf("reclaim removed %+v; metrics went from %+v to %+v", st, before, after)
	}
	if got := read(t, m, "main", "f36"); got != "data" {
		t.Fatalf("main/f36 = %q, want the committed data", got)
	}
}

package branches_test

import (
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestReclaimDeletesDeadCheckpoints: the checkpoint records of a committed
// or aborted branch go at the next reclamation pass (folds read every
// checkpoint record on each pass); those of live branches stay usable.
func TestReclaimDeletesDeadCheckpoints(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	countCPs := func() int {
		n := 0
		err := m.Store().View(ctx, func(tx kv.Txn) error {
			return tx.Iterate([]byte{'K'}, nil, true, func(_, _ []byte) (bool, error) { n++; return true, nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	write(t, m, "main", "f", "base")
	must(m.Checkpoint(ctx, "main", "keep"))(t)
	for _, b := range []string{"aborted", "committed"} {
		must(m.Fork(ctx, "main", b))(t)
		write(t, m, b, "g", b)
		must(m.Checkpoint(ctx, b, "one"))(t)
		must(m.Checkpoint(ctx, b, "two"))(t)
	}
	must(m.Abort(ctx, "aborted"))(t)
	must(m.Commit(ctx, "committed"))(t)
	if n := countCPs(); n != 5 {
		t.Fatalf("%d checkpoint records before the pass, want 5", n)
	}
	st, err := m.Reclaim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Checkpoints != 4 || countCPs() != 1 {
		t.Fatalf("pass deleted %d checkpoint records, %d left; want 4 deleted, 1 left", st.Checkpoints, countCPs())
	}
	must(m.ForkCheckpoint(ctx, "main", "keep", "again"))(t)
	if got := read(t, m, "again", "f"); got != "base" {
		t.Fatalf("fork of main's checkpoint reads %q", got)
	}
}

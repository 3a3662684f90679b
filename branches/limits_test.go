package branches_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestReclaimWithinStoreLimits: reclamation deletes a dead branch's layer
// and checkpoints, and the blocks only it referenced, in batches sized by
// the store's Limits, so it works on a
// store that takes 128 writes per transaction (etcd's default) when the
// branch holds many more keys and checkpoints than that.
func TestReclaimWithinStoreLimits(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), kv.Limits{Writes: 128, Reads: math.MaxInt, Bytes: 1<<20 + 1<<19 - 512, OpBytes: 24})
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	must(m.Fork(ctx, "main", "kid"))(t)
	for i := range 150 {
		// An inode, an entry and a block of content each.
		write(t, m, "kid", fmt.Sprintf("f%03d", i), strings.Repeat(fmt.Sprintf("file %d;", i), 200))
	}
	for i := range 150 {
		must(m.Checkpoint(ctx, "kid", fmt.Sprintf("cp%03d", i)))(t)
	}
	must(m.Abort(ctx, "kid"))(t)
	rs, err := m.Reclaim(ctx)
	if err != nil {
		t.Fatalf("Reclaim on a store of 128 writes per transaction: %v", err)
	}
	if rs.Checkpoints != 150 || rs.Keys < 300 || rs.Blocks < 150 {
		t.Fatalf("Reclaim deleted %+v; want the 150 checkpoints, at least 300 keys and 150 blocks", rs)
	}
}

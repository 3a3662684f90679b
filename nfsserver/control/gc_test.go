package control

import (
	"context"
	"errors"
	"testing"
)

// TestGCThroughClient: POST /v1/gc runs the manager's GC and answers its
// figures; a backend that cannot collect answers an error.
func TestGCThroughClient(t *testing.T) {
	ctx := context.Background()
	// Something to collect: an aborted branch's 6 MiB (more than Badger
	// leaves in the log it writes).
	m, dir := diskManager(t, 6<<20)
	if _, err := m.Abort(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	c := serveBackend(t, m, dir)
	res, err := c.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reclaim.Blocks < 192 || res.DiskBefore < 6<<20 || res.DiskAfter <= 0 || res.DiskAfter > res.DiskBefore-5<<20 {
		t.Fatalf("GC answered %+v: want the 6 MiB of the aborted branch deleted and given back", res)
	}

	// The fake backend cannot collect.
	_, fc, _ := startServer(t)
	if _, err := fc.GC(ctx); err == nil {
		t.Fatal("GC on a backend that cannot collect succeeded")
	} else if e := (*Error)(nil); !errors.As(err, &e) || e.Status != 500 {
		t.Fatalf("GC on a backend that cannot collect: %v", err)
	}
}

package control

import (
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// TestSpaceThroughClient: GET /v1/space and /v1/space/unique answer the
// manager's figures; a backend that cannot report answers an error.
func TestSpaceThroughClient(t *testing.T) {
	ctx := context.Background()
	m, dir := diskManager(t, 1<<20)
	c := serveBackend(t, m, dir)
	u, err := c.UniqueBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(u) != 2 || u["b"] != 1<<20 || u["main"] != 0 {
		t.Fatalf("unique bytes %v, want b's 1 MiB and main's nothing", u)
	}
	rep, err := c.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ContentBytes != 1<<20 || rep.DiskBytes < 1<<20 || rep.Branches[branches.StateLive] != 2 || rep.UniqueBytes["b"] != 1<<20 {
		t.Fatalf("space %+v: want b's 1 MiB of content, on disk, and two live branches", rep)
	}

	// The fake backend cannot report.
	_, fc, _ := startServer(t)
	if _, err := fc.Space(ctx); err == nil {
		t.Fatal("Space on a backend that cannot report succeeded")
	}
	if _, err := fc.UniqueBytes(ctx); err == nil {
		t.Fatal("UniqueBytes on a backend that cannot report succeeded")
	}
}

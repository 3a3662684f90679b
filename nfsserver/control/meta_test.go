package control

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
)

func TestMetaAndLeases(t *testing.T) {
	ctx := context.Background()
	m := branchestest.NewManager(t, branches.Options{})
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := NewServer(ServerOptions{Backend: m, Token: mustToken(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { srv.Serve(sctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	c := NewClient(SocketPath(dir))
	defer c.Close()

	for _, n := range []string{"a", "b"} {
		if _, err := c.Fork(ctx, "main", n); err != nil {
			t.Fatal(err)
		}
	}
	s := 3.5
	md, err := c.SetMeta(ctx, "a", branches.MetaUpdate{Labels: map[string]string{"task": "x"}, Score: &s})
	if err != nil || md.Labels["task"] != "x" || md.Score == nil || *md.Score != 3.5 {
		t.Fatalf("SetMeta: %+v, %v", md, err)
	}
	if _, err := c.SetMeta(ctx, "nosuch", branches.MetaUpdate{Score: &s}); !errors.Is(err, branches.ErrNotFound) {
		t.Fatalf("SetMeta of a missing branch: %v", err)
	}
	all, err := c.Metas(ctx)
	if err != nil || len(all) != 1 || *all["a"].Score != 3.5 {
		t.Fatalf("Metas: %+v, %v", all, err)
	}
	// The server enforces leases: b is aborted once its lease passes.
	if _, err := c.SetMeta(ctx, "b", branches.MetaUpdate{LeaseMS: 1}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, err := c.Get(ctx, "b")
		if errors.Is(err, branches.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still there a minute after its lease expired: %v", err)
		}
	}
	if _, err := c.Get(ctx, "a"); err != nil {
		t.Fatalf("a, without a lease: %v", err)
	}
}

func TestMetaNeedsMetaBackend(t *testing.T) {
	_, c, _ := startServer(t)
	if _, err := c.Metas(context.Background()); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Metas on a backend without meta: %v", err)
	}
}

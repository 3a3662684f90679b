package control

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// TestSpaceThroughClient: GET /v1/space and /v1/space/unique answer the
// manager's figures; a backend that cannot report answers an error.
func TestSpaceThroughClient(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ctlspace")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := kv.OpenBadger(dir+"/store", kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	if _, err := m.Fork(ctx, "main", "b"); err != nil {
		t.Fatal(err)
	}
	v, _, err := m.View("b")
	if err != nil {
		t.Fatal(err)
	}
	a, err := v.Create(cowfs.RootIno, "f", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 1<<20)
	x := uint32(7)
	for i := range p {
		x = x*1664525 + 1013904223
		p[i] = byte(x >> 24)
	}
	if _, err := v.WriteAt(a.Ino, p, 0); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerOptions{Backend: m, Token: mustToken(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	sock := SocketPath(dir)
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	c, _, err := Dial(ctx, sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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

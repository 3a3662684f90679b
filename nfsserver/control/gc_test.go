package control

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// TestGCThroughClient: POST /v1/gc runs the manager's GC and answers its
// figures; a backend that cannot collect answers an error.
func TestGCThroughClient(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ctlgc")
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
	// Something to collect: an aborted branch's 6 MiB (more than Badger leaves in the log it writes).
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
	p := make([]byte, 6<<20)
	x := uint32(1)
	for i := range p {
		x = x*1664525 + 1013904223
		p[i] = byte(x >> 24)
	}
	if _, err := v.WriteAt(a.Ino, p, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Abort(ctx, "b"); err != nil {
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

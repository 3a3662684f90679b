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

// diskManager opens a manager over a Badger store in a new directory
// (returned: the control socket and token go there too), with branch b
// forked from main holding file f of size pseudo-random bytes.
func diskManager(t *testing.T, size int) (*branches.Manager, string) {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ctlstore")
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
	p := make([]byte, size)
	x := uint32(size)
	for i := range p {
		x = x*1664525 + 1013904223
		p[i] = byte(x >> 24)
	}
	if _, err := v.WriteAt(a.Ino, p, 0); err != nil {
		t.Fatal(err)
	}
	return m, dir
}

// serveBackend serves the API over backend on dir's control socket until
// the test ends, and returns a client of it.
func serveBackend(t *testing.T, backend Backend, dir string) *Client {
	t.Helper()
	ctx := context.Background()
	srv, err := NewServer(ServerOptions{Backend: backend, Token: mustToken(t, dir)})
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
	t.Cleanup(c.Close)
	return c
}

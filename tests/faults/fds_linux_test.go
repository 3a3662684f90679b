package faults

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestFDExhaustion runs a real server, as an unprivileged user, with a
// limit of 96 open files, and opens more connections than it has file
// descriptors left. Accepting then fails with EMFILE: the server must back
// off and keep running, keep serving the client it already has, and serve
// new clients once connections close, with no acknowledged byte lost.
func TestFDExhaustion(t *testing.T) {
	store, uid := unprivilegedStore(t)
	s := startServerOpts(t, store, testbin.ServerOptions{User: testbin.User{UID: uid, GID: uid}, NoFile: 96})
	c := mount(t, s.port, "/main", 0)
	data := bytes.Repeat([]byte("fd-exhaustion\n"), 5000)
	fh, err := c.tg.Create("kept", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if stat, err := c.write(fh, 0, data); err != nil || stat != nfs.NFS3Ok {
		t.Fatalf("write: %d %v", stat, err)
	}

	// Far more connections than the server has descriptors left: the
	// kernel completes them into the listen backlog, and every accept
	// beyond the limit fails with EMFILE.
	var hogs []net.Conn
	for range 300 {
		h, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 2*time.Second)
		if err != nil {
			break // the backlog is full: enough
		}
		hogs = append(hogs, h)
	}
	t.Logf("%d connections opened", len(hogs))
	time.Sleep(2 * time.Second)
	s.alive(t, "with its file descriptors exhausted")
	// The client connected before keeps being served.
	if got, err := c.read(fh); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read by the connected client while fds are exhausted: %d bytes, %v", len(got), err)
	}
	for _, h := range hogs {
		h.Close()
	}
	// Descriptors come back as the server sees the hogs close: a new
	// client gets served, and the data is intact.
	var c2 *conn
	deadline := time.Now().Add(60 * time.Second)
	for c2 == nil {
		s.alive(t, "after the connections closed")
		if time.Now().After(deadline) {
			t.Fatalf("no new client served within 60 s of the connections closing\n%s", s.out.String())
		}
		if c2, err = tryMount(s.port, "/main", 0, 5*time.Second); err != nil {
			t.Logf("mount: %v", err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	defer c2.c.Close()
	got, err := c2.read(fh)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read by a new client after recovery: %d bytes, %v", len(got), err)
	}
	// The limit was really reached, and the server said so.
	if out := s.out.String(); !strings.Contains(out, "accept failed") || !strings.Contains(out, "too many open files") {
		t.Fatalf("the server never logged an EMFILE from accept: the test did not exhaust its descriptors\n%s", out)
	}
}

package control

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// forward accepts TCP connections on loopback and forwards each to the
// unix socket sock, as socat or a VM's port forward would.
func forward(t *testing.T, sock string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", sock)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func TestClientOverTCP(t *testing.T) {
	_, c0, sock := startServer(t)
	t.Setenv(TokenEnv, c0.token)
	c, st, err := Dial(context.Background(), "tcp://"+forward(t, sock), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st.PID != 42 {
		t.Fatalf("status over TCP %+v", st)
	}
	if _, err := c.Fork(context.Background(), "main", "viatcp"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Dial(context.Background(), "tcp://127.0.0.1:1", time.Second); err == nil {
		t.Fatal("dialing a closed port succeeded")
	}
}

package testbin

import (
	"io"
	"net"
	"testing"
)

// ForwardUnix forwards TCP connections on 127.0.0.1 to the unix socket
// sock, until the test ends, and returns the port: a server's control
// socket made reachable as $BRANCHNFS_CONTROL=tcp://127.0.0.1:PORT (or
// from a qemu guest, as 10.0.2.2:PORT).
func ForwardUnix(t testing.TB, sock string) int {
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
	return ln.Addr().(*net.TCPAddr).Port
}

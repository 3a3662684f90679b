package nfsserver

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestDiagUID checks the kernel's answer for a connection's client socket
// against /proc's, for IPv4 and (where the machine has it) IPv6, and that a
// socket that does not exist is reported as absent, not as an error.
func TestDiagUID(t *testing.T) {
	for _, network := range []struct{ name, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(network.name, func(t *testing.T) {
			ln, err := net.Listen(network.name, network.addr)
			if err != nil {
				if network.name == "tcp6" {
					testbin.Prerequisite(t, false, fmt.Sprintf("no IPv6 loopback here (%v)", err), "give lo the address ::1")
				}
				t.Fatal(err)
			}
			defer ln.Close()
			c, err := net.Dial(network.name, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			peer, server := c.LocalAddr().(*net.TCPAddr), ln.Addr().(*net.TCPAddr)
			ps, ok, err := diagUID(peer, server)
			if err != nil || !ok || !ps.owned() {
				t.Fatalf("diagUID(%v, %v) = %+v, %v, %v; want the client socket found, connected and held", peer, server, ps, ok, err)
			}
			uid := ps.uid
			if want := uint32(os.Geteuid()); uid != want {
				t.Errorf("diagUID = uid %d, want %d", uid, want)
			}
			if puid, err := procUID(peer, server); err != nil || puid != uid {
				t.Errorf("procUID = %d, %v; diagUID said %d", puid, err, uid)
			}
			// The same ports the other way round name the server's
			// accepted socket only if one was accepted; none was.
			absent := &net.TCPAddr{IP: peer.IP, Port: peer.Port}
			other := &net.TCPAddr{IP: server.IP, Port: server.Port + 1}
			if server.Port == 65535 {
				other.Port = 1
			}
			if ps, ok, err := diagUID(absent, other); err != nil || ok {
				t.Errorf("diagUID of a socket that does not exist = %+v, %v, %v; want not found", ps, ok, err)
			}
			if _, err := socketUID(absent, other); err == nil {
				t.Error("socketUID of a socket that does not exist: no error")
			}
		})
	}
}

// TestDiagUIDUnprivileged runs TestDiagUID as a user who is not root, as
// users run the server: sock_diag must answer them too.
func TestDiagUIDUnprivileged(t *testing.T) {
	testbin.PassesUnprivileged(t, "TestDiagUID", "TestDiagUID/tcp4", TestDiagUID)
}

// BenchmarkSocketUID times finding a connection's client socket owner, by
// sock_diag and by the /proc scan it replaced (the cost every new
// connection from an unprivileged port pays before its first call).
func BenchmarkSocketUID(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	peer, server := c.LocalAddr().(*net.TCPAddr), ln.Addr().(*net.TCPAddr)
	b.Run("sock_diag", func(b *testing.B) {
		for b.Loop() {
			if _, ok, err := diagUID(peer, server); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("proc", func(b *testing.B) {
		for b.Loop() {
			if _, err := procUID(peer, server); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestClosedSocketHasNoOwner: a client socket closed by its process stays
// in the kernel's tables (FIN_WAIT2, then TIME_WAIT) under uid 0; neither
// lookup may report it as root's.
func TestClosedSocketHasNoOwner(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close() // the server end stays open: the client's stays in the table
	peer, server := c.LocalAddr().(*net.TCPAddr), ln.Addr().(*net.TCPAddr)
	c.Close()
	ps, ok, err := diagUID(peer, server)
	if err != nil || !ok {
		t.Fatalf("diagUID of a closed socket = %+v, %v, %v; want it found (the kernel keeps it)", ps, ok, err)
	}
	if ps.owned() {
		t.Fatalf("diagUID of a closed socket = %+v: reported as held by uid %d", ps, ps.uid)
	}
	if uid, err := socketUID(peer, server); err == nil {
		t.Fatalf("socketUID of a closed socket = uid %d, no error", uid)
	}
	if uid, err := procUID(peer, server); err == nil {
		t.Fatalf("procUID of a closed socket = uid %d, no error", uid)
	}
}

package nfsserver

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// listenCC listens on loopback with congestion control cc, which the
// connections it accepts inherit (it was set on the listener by hand).
// Without cc here the test skips, or fails under CI.
func listenCC(t *testing.T, cc string) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		testbin.Prerequisite(t, false, fmt.Sprintf("congestion control %s not available here (%v)", cc, err),
			"load the tcp_"+cc+" module and list it in net.ipv4.tcp_allowed_congestion_control")
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func congestion(t *testing.T, c net.Conn) string {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cc string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cc, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return cc
}

// TestUnpace: a connection on bbr is switched to reno, one on reno is
// left alone.
func TestUnpace(t *testing.T) {
	for _, tc := range []struct{ cc, wantTo string }{{"bbr", "reno"}, {"reno", ""}} {
		t.Run(tc.cc, func(t *testing.T) {
			sc, _ := dialAccept(t, listenCC(t, tc.cc))
			if got := congestion(t, sc); got != tc.cc {
				t.Fatalf("accepted connection on %s, want %s inherited from the listener", got, tc.cc)
			}
			from, to, err := unpace(sc.(*net.TCPConn))
			if err != nil || from != tc.cc {
				t.Fatalf("unpace = %q, %q, %v; want from %q", from, to, err, tc.cc)
			}
			now := congestion(t, sc)
			switch {
			case tc.wantTo == "" && (to != "" || now != tc.cc):
				t.Errorf("unpace changed %s to %q (now %s)", tc.cc, to, now)
			case tc.wantTo != "" && (to != tc.wantTo || now != tc.wantTo):
				t.Errorf("unpace reported %q, connection now on %s; want %s", to, now, tc.wantTo)
			}
		})
	}
}

// TestUnpaceUnprivileged runs TestUnpace as a user who is not root, as
// users run the server: reno must be open to them.
func TestUnpaceUnprivileged(t *testing.T) {
	testbin.PassesUnprivileged(t, "TestUnpace", "TestUnpace/bbr", TestUnpace)
}

// TestServeUnpacesLoopback: the server switches its loopback connections
// off bbr unless Options.KeepPacing, and counts those it switched.
func TestServeUnpacesLoopback(t *testing.T) {
	for _, keep := range []bool{false, true} {
		s, err := New(Options{Branches: fakeStore(), Logger: testLogger(t), KeepPacing: keep})
		if err != nil {
			t.Fatal(err)
		}
		ln := listenCC(t, "bbr")
		done := make(chan error, 1)
		go func() { done <- s.Serve(context.Background(), ln) }()
		if ok, err := nullCall(ln.Addr().String(), nil); err != nil || !ok {
			t.Fatalf("NULL call: %v", err)
		}
		s.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := uint64(1)
		if keep {
			want = 0
		}
		if got := s.Metrics().Unpaced; got != want {
			t.Errorf("KeepPacing %v: Unpaced = %d, want %d", keep, got, want)
		}
	}
}

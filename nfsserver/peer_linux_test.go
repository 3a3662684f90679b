package nfsserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestPeerUIDFilter: a userspace client (unprivileged source port) is
// served only if its socket belongs to an allowed uid.
func TestPeerUIDFilter(t *testing.T) {
	self := uint32(os.Geteuid())
	t.Run("owner served", func(t *testing.T) {
		s, addr := startServer(t, fakeStore(), nil)
		if ok, err := nullCall(addr, nil); err != nil || !ok {
			t.Fatalf("own client not served: %v", err)
		}
		if n := s.Metrics().Refused; n != 0 {
			t.Fatalf("Refused = %d", n)
		}
	})
	t.Run("other uid refused", func(t *testing.T) {
		s, addr := startServer(t, fakeStore(), func(s *Server) { s.opts.AllowUIDs = []uint32{self + 1} })
		if ok, err := nullCall(addr, nil); err != nil || ok {
			t.Fatalf("client of uid %d served though only uid %d may connect (err %v)", self, self+1, err)
		}
		if n := s.Metrics().Refused; n != 1 {
			t.Fatalf("Refused = %d, want 1", n)
		}
	})
	if os.Geteuid() != 0 {
		t.Log("not root: the privileged-port and other-process cases need root")
		return
	}
	t.Run("privileged port served", func(t *testing.T) {
		_, addr := startServer(t, fakeStore(), func(s *Server) { s.opts.AllowUIDs = []uint32{12345} })
		var err error
		for port := 700; port < 1000; port++ {
			var ok bool
			ok, err = nullCall(addr, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
			if err == nil {
				if !ok {
					t.Fatalf("client from privileged port %d refused", port)
				}
				return
			}
		}
		t.Fatalf("no free privileged port: %v", err)
	})
	t.Run("process of another user refused", func(t *testing.T) {
		s, addr := startServer(t, fakeStore(), nil) // default: this uid (root) and root
		out, err := runTestAs(t, 54321, "TestPeerHelperProcess", "BNFS_PEER_ADDR="+addr)
		if err != nil || !strings.Contains(string(out), "answered=false") {
			t.Fatalf("client as uid 54321: %v\n%s", err, out)
		}
		if n := s.Metrics().Refused; n != 1 {
			t.Fatalf("Refused = %d, want 1", n)
		}
		if ok, err := nullCall(addr, nil); err != nil || !ok {
			t.Fatalf("root's client not served: %v", err)
		}
	})
}

// runTestAs runs test (a test function of this package) in a copy of this
// test binary as uid (and gid) uid, with env added to its environment,
// and returns its output. The caller must be root.
func runTestAs(t *testing.T, uid uint32, test string, env ...string) ([]byte, error) {
	t.Helper()
	bin := filepath.Join(testbin.SharedTempDir(t, "bnfs-as"), "nfsserver.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd.CombinedOutput()
}

// passesUnprivileged runs test as a user who is not root and checks that
// its subtest (or test) want passed, not skipped: as root through
// runTestAs as uid 54321, otherwise by calling fn.
func passesUnprivileged(t *testing.T, test, want string, fn func(*testing.T)) {
	t.Helper()
	if os.Geteuid() != 0 {
		fn(t) // already not root
		return
	}
	out, err := runTestAs(t, 54321, test)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+want+" ") {
		t.Fatalf("%s as uid 54321: %v\n%s", test, err, out)
	}
}

// TestPeerHelperProcess is the client of another user in TestPeerUIDFilter.
func TestPeerHelperProcess(t *testing.T) {
	addr := os.Getenv("BNFS_PEER_ADDR")
	if addr == "" {
		return // not run as a helper
	}
	ok, err := nullCall(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("uid=%d answered=%v\n", os.Geteuid(), ok)
}

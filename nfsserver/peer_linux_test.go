package nfsserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/lograte"
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
		out, err := testbin.RunTestAs(t, testbin.UnprivilegedUID, "TestPeerHelperProcess", "BNFS_PEER_ADDR="+addr)
		if err != nil || !strings.Contains(string(out), "answered=false") {
			t.Fatalf("client as uid %d: %v\n%s", testbin.UnprivilegedUID, err, out)
		}
		if n := s.Metrics().Refused; n != 1 {
			t.Fatalf("Refused = %d, want 1", n)
		}
		if ok, err := nullCall(addr, nil); err != nil || !ok {
			t.Fatalf("root's client not served: %v", err)
		}
	})
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

// TestPeerClosedSocketRefused: another user's client that connects, sends
// a whole call and closes at once leaves a socket the kernel keeps under
// uid 0 (FIN_WAIT2, TIME_WAIT); the server, run as a user who is not
// root, must not take it for root's. Every round must be refused and no
// call served.
func TestPeerClosedSocketRefused(t *testing.T) {
	testbin.NeedRoot(t, "the server and its attacker run as two users who are not root")
	const rounds = 400
	srv := testbin.CommandAs(t, testbin.UnprivilegedUID-1, "TestPeerServerHelper", "BNFS_PEER_SERVE=1")
	stdin, err := srv.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testbin.SyncBuffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var addr string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "addr="); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatalf("server helper printed no address: %v\n%s", sc.Err(), stderr.String())
	}
	out, err := testbin.RunTestAs(t, testbin.UnprivilegedUID, "TestPeerCloserHelper", "BNFS_PEER_ADDR="+addr, fmt.Sprintf("BNFS_PEER_ROUNDS=%d", rounds))
	if err != nil || !strings.Contains(string(out), "sent=") {
		t.Fatalf("attacker as uid %d: %v\n%s", testbin.UnprivilegedUID, err, out)
	}
	// The server accepts the queued connections only now: every client
	// closed its socket long before.
	if _, err := io.WriteString(stdin, "serve\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close() // the server helper prints its counts and ends
	var counts string
	for sc.Scan() {
		if c, ok := strings.CutPrefix(sc.Text(), "counts "); ok {
			counts = c
		}
	}
	if err := srv.Wait(); err != nil || counts == "" {
		t.Fatalf("server helper: %v\n%s", err, stderr.String())
	}
	var requests, refused, conns int
	if _, err := fmt.Sscanf(counts, "requests=%d refused=%d conns=%d", &requests, &refused, &conns); err != nil {
		t.Fatalf("server helper counts %q: %v", counts, err)
	}
	t.Logf("attacker: %s; server: %s", strings.TrimSpace(string(out)), counts)
	if requests != 0 {
		t.Fatalf("%d calls of another user's closed connections served (of %d rounds; server counts %s)", requests, rounds, counts)
	}
	if refused != conns || conns == 0 {
		t.Fatalf("server accepted %d connections, refused %d: every one must be refused", conns, refused)
	}
}

// TestPeerServerHelper is the server of TestPeerClosedSocketRefused: it
// listens and prints its address, serves with the default AllowUIDs (its
// own uid and root) once a line arrives on its stdin (the connections
// made meanwhile wait in the listen queue, as they would for a server
// busy elsewhere), and prints its counts when its stdin closes.
func TestPeerServerHelper(t *testing.T) {
	if os.Getenv("BNFS_PEER_SERVE") == "" {
		return // not run as a helper
	}
	s, err := New(Options{Branches: fakeStore(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("addr=%s\n", ln.Addr())
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	io.Copy(io.Discard, in)
	settle(t, s)
	m := s.Metrics()
	s.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fmt.Printf("counts requests=%d refused=%d conns=%d\n", m.Requests, m.Refused, m.Connections)
}

// TestPeerCloserHelper is the attacker of TestPeerClosedSocketRefused:
// BNFS_PEER_ROUNDS times, it connects, sends a whole MOUNT NULL call
// with an AUTH_SYS credential of uid 0 and closes at once.
func TestPeerCloserHelper(t *testing.T) {
	addr := os.Getenv("BNFS_PEER_ADDR")
	rounds, _ := strconv.Atoi(os.Getenv("BNFS_PEER_ROUNDS"))
	if addr == "" || rounds == 0 {
		return // not run as a helper
	}
	rec := callMsg(7, 2, progMount, 3, 0, authRoot, nil)
	out := append(binary.BigEndian.AppendUint32(nil, 0x80000000|uint32(len(rec))), rec...)
	sent := 0
	for range rounds {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(out); err == nil {
			sent++
		}
		nc.Close()
	}
	fmt.Printf("uid=%d sent=%d\n", os.Geteuid(), sent)
}

// TestRefusalsDoNotFloodTheLog: refused connections are logged once,
// then at most once every lograte.Every with the count of those not
// logged, as the control API's refused requests are.
func TestRefusalsDoNotFloodTheLog(t *testing.T) {
	var logBuf testbin.SyncBuffer
	s, addr := startServer(t, fakeStore(), func(s *Server) {
		s.opts.AllowUIDs = []uint32{uint32(os.Geteuid()) + 1}
		s.log = slog.New(slog.NewTextHandler(&logBuf, nil))
	})
	const n = 300
	for range n {
		if ok, err := nullCall(addr, nil); err != nil || ok {
			t.Fatalf("refused client answered (%v)", err)
		}
	}
	settle(t, s)
	if got := s.Metrics().Refused; got != n {
		t.Fatalf("Refused = %d, want %d", got, n)
	}
	if lines := strings.Count(logBuf.String(), "nfs: connection refused"); lines != 1 {
		t.Fatalf("%d refusals logged %d lines, want 1:\n%s", n, lines, logBuf.String())
	}
	if ok, unlogged := s.refusals.Allow(time.Now().Add(lograte.Every + time.Second)); !ok || unlogged != n-1 {
		t.Fatalf("after the interval: Allow = %v, %d unlogged; want true, %d", ok, unlogged, n-1)
	}
}

package nfsserver

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestCallMemoryBoundedUnprivileged runs TestCallMemoryBounded as a user
// who is not root, as users run the server.
func TestCallMemoryBoundedUnprivileged(t *testing.T) {
	testbin.PassesUnprivileged(t, "TestCallMemoryBounded", "TestCallMemoryBounded", TestCallMemoryBounded)
}

// TestUnreadRepliesRSS: 1,024 connections that each send 64 READs of 1
// MiB and never read a reply, against a server with the default
// Options, keep the process's peak RSS (VmHWM) under 300 MiB, and a
// fresh client is served meanwhile. It runs in a process of its own
// (its peak is this scenario's alone), as a user who is not root.
func TestUnreadRepliesRSS(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory makes RSS meaningless here")
	}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = testbin.CommandAs(t, testbin.UnprivilegedUID, "TestUnreadRepliesRSSHelper", "BNFS_RSS_HELPER=1")
	} else {
		cmd = exec.Command(os.Args[0], "-test.run=^TestUnreadRepliesRSSHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "BNFS_RSS_HELPER=1")
	}
	out, err := cmd.CombinedOutput()
	var line string
	for l := range strings.Lines(string(out)) {
		if strings.HasPrefix(l, "rss ") {
			line = strings.TrimSpace(l)
		}
	}
	if err != nil || line == "" {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	t.Log(line)
	var base, peak int64
	if _, err := fmt.Sscanf(line, "rss base=%dMiB peak=%dMiB", &base, &peak); err != nil {
		t.Fatalf("helper printed %q: %v", line, err)
	}
	if peak >= 300 {
		t.Fatalf("peak RSS %d MiB (%d MiB before the clients came) with 1,024 connections that do not read their replies; want under 300 MiB", peak, base)
	}
}

// TestUnreadRepliesRSSHelper is the process of TestUnreadRepliesRSS.
func TestUnreadRepliesRSSHelper(t *testing.T) {
	if os.Getenv("BNFS_RSS_HELPER") == "" {
		return // not run as a helper
	}
	m := newManager(t, "")
	s, addr := startServer(t, m, func(s *Server) {
		// A stuck connection is closed sooner than by default, so
		// that the fresh client's wait is short; the budget is the
		// default.
		s.stallAfter = time.Second
	})
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	root := c.mnt("/main")
	fh, _, st := k.create(root, "big", 1, sa{})
	must(t, st, "create")
	_, _, _, st = k.write(fh, 0, make([]byte, maxIO), unstable)
	must(t, st, "write")
	if _, _, st := k.read(fh, 0, maxIO); st != 0 {
		t.Fatalf("READ: %d", st)
	}
	base := vmHWM(t)

	const hogs, calls = 1024, 64
	var flood []byte
	for i := range calls {
		rec := callMsg(uint32(i+1), 2, progNFS, 3, 6, authRoot, args(fh, uint64(0), uint32(maxIO)))
		flood = binary.BigEndian.AppendUint32(flood, 0x80000000|uint32(len(rec)))
		flood = append(flood, rec...)
	}
	var conns []net.Conn
	for range hogs {
		hog, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		hog.(*net.TCPConn).SetReadBuffer(16 << 10)
		if _, err := hog.Write(flood); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, hog)
	}
	if _, _, st := k.read(fh, 0, maxIO); st != 0 {
		t.Fatalf("READ by a fresh client: %d", st)
	}
	for _, hog := range conns {
		hog.Close()
	}
	settle(t, s)
	mt := s.Metrics()
	fmt.Printf("calls read %d of %d, call memory peak %d MiB, stalled writes %d\n", mt.Requests, hogs*calls, mt.CallMemoryPeak>>20, mt.StalledWrites)
	fmt.Printf("rss base=%dMiB peak=%dMiB\n", base>>20, vmHWM(t)>>20)
}

// vmHWM returns this process's peak RSS.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

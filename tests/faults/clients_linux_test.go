package faults

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"
)

// rssBytes is the resident set size of process pid.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// readCall is an NFS READ call record (AUTH_NULL) of count bytes of fh.
func readCall(xid uint32, fh []byte, count uint32) []byte {
	var b []byte
	u32 := func(v uint32) { b = binary.BigEndian.AppendUint32(b, v) }
	u32(0) // record mark, set below
	u32(xid)
	u32(0) // CALL
	u32(2) // RPC version
	u32(nfs.Nfs3Prog)
	u32(nfs.Nfs3Vers)
	u32(nfs.NFSProc3Read)
	u32(0) // AUTH_NULL credential
	u32(0)
	u32(0) // AUTH_NULL verifier
	u32(0)
	u32(uint32(len(fh)))
	b = append(b, fh...)
	b = append(b, make([]byte, (4-len(fh)%4)%4)...)
	b = binary.BigEndian.AppendUint64(b, 0)
	u32(count)
	binary.BigEndian.PutUint32(b, 0x80000000|uint32(len(b)-4))
	return b
}

// TestGreedyAndSlowClients attaches to a real server, running as an
// unprivileged user, a client that sends 400 READs of 1 MiB and never
// reads the replies, and 20 clients that each send part of a request and
// stall. The server must keep its memory bounded, serve another client
// meanwhile, and lose no acknowledged byte.
func TestGreedyAndSlowClients(t *testing.T) {
	store, uid := unprivilegedStore(t)
	s := startServer(t, store, uid)
	c := mount(t, s.port, "/main", 0)

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	fh, err := c.tg.Create("big", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if stat, err := c.write(fh, 0, big); err != nil || stat != nfs.NFS3Ok {
		t.Fatalf("write: %d %v", stat, err)
	}
	before := rssBytes(t, s.Cmd.Process.Pid)

	hog, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	hog.(*net.TCPConn).SetReadBuffer(16 << 10)
	var calls []byte
	const reads = 400
	for i := range reads {
		calls = append(calls, readCall(uint32(i+1), fh, 1<<20)...)
	}
	if _, err := hog.Write(calls); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		slow, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		if _, err := slow.Write([]byte{0x80, 0, 0, 100, 0, 0, 0, 1}); err != nil {
			t.Fatal(err)
		}
	}

	// Another client is served meanwhile.
	if got, err := c.read(fh); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read by another client while the hog waits: %d bytes, %v", len(got), err)
	}
	// Let the server take what it will from the hog: its memory must
	// settle well below the 400 MiB of replies the hog asked for.
	rss, last, same := int64(0), int64(-1), 0
	deadline := time.Now().Add(60 * time.Second)
	for same < 10 {
		time.Sleep(100 * time.Millisecond)
		rss = rssBytes(t, s.Cmd.Process.Pid)
		if d := rss - last; d < 1<<20 && d > -(1<<20) {
			same++
		} else {
			last, same = rss, 0
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Logf("server RSS %d MiB before the hog, %d MiB with it", before>>20, rss>>20)
	if rss-before > 128<<20 {
		t.Fatalf("server RSS grew by %d MiB for a client that does not read its replies", (rss-before)>>20)
	}
	s.alive(t, "with a greedy and 20 slow clients")
	if got, err := c.read(fh); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read after the hog settled: %d bytes, %v", len(got), err)
	}

	// Restart: the acknowledged data is intact.
	hog.Close()
	s.stop(t)
	s = startServer(t, store, uid)
	c = mount(t, s.port, "/main", 0)
	_, fh2, err := c.tg.Lookup("big")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.read(fh2); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read after a restart: %d bytes, %v", len(got), err)
	}
	s.stop(t)
}

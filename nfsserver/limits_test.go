package nfsserver

import (
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// settle polls until the server's request count has not moved for half a
// second, and returns it: the server then reads no more requests.
func settle(t *testing.T, s *Server) uint64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last, same := s.Metrics().Requests, 0
	for same < 20 {
		time.Sleep(25 * time.Millisecond)
		m := s.Metrics()
		if m.Requests == last {
			same++
		} else {
			last, same = m.Requests, 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never settled: %+v", m)
		}
	}
	return last
}

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC() // pooled buffers survive one GC in the victim cache
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// A client that sends 1 MiB READs and never reads the replies must not
// grow the server's heap without bound, and other clients are still
// served; once it reads, it gets every reply.
func TestUnreadRepliesBounded(t *testing.T) {
	m := newManager(t, "")
	s, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	root := c.mnt("/main")
	fh, _, st := k.create(root, "big", 1, sa{})
	must(t, st, "create")
	chunk := make([]byte, maxIO)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	_, _, _, st = k.write(fh, 0, chunk, unstable)
	must(t, st, "write")

	hog, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	hog.(*net.TCPConn).SetReadBuffer(16 << 10)
	before := heapInuse()
	const n = 400 // 400 MiB of replies
	var calls []byte
	for i := range n {
		rec := callMsg(uint32(i+1), 2, progNFS, 3, 6, authRoot, args(fh, uint64(0), uint32(maxIO)))
		calls = binary.BigEndian.AppendUint32(calls, 0x80000000|uint32(len(rec)))
		calls = append(calls, rec...)
	}
	if _, err := hog.Write(calls); err != nil { // 40 KB: fits the socket buffers
		t.Fatal(err)
	}
	served := settle(t, s)
	grown := int64(heapInuse()) - int64(before)
	t.Logf("requests read from the hog: %d of %d; heap grew by %d MiB; throttled %d times",
		served, n, grown>>20, s.Metrics().Throttled)
	if grown > 96<<20 {
		t.Fatalf("heap grew by %d MiB for a client that does not read its replies", grown>>20)
	}
	if s.Metrics().Throttled == 0 {
		t.Fatal("the connection was never throttled")
	}

	data, _, st := k.read(fh, 0, maxIO)
	must(t, st, "READ by another client")
	if len(data) != maxIO || data[12345] != chunk[12345] {
		t.Fatalf("READ by another client returned %d bytes", len(data))
	}

	// The hog reads now and gets all its replies.
	hog.SetReadDeadline(time.Now().Add(60 * time.Second))
	seen := map[uint32]bool{}
	for len(seen) < n {
		var hdr [4]byte
		if _, err := io.ReadFull(hog, hdr[:]); err != nil {
			t.Fatalf("after %d replies: %v", len(seen), err)
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[:])&0x7fffffff)
		if _, err := io.ReadFull(hog, b); err != nil {
			t.Fatal(err)
		}
		seen[binary.BigEndian.Uint32(b)] = true
	}
}

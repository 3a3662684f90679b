package nfsserver

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// nullCall connects to addr from laddr (nil: any port), sends an NFS NULL
// call and reports whether it was answered; a refused connection is closed
// without a reply.
func nullCall(addr string, laddr *net.TCPAddr) (answered bool, err error) {
	d := net.Dialer{LocalAddr: laddr, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return false, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	rec := callMsg(7, 2, progNFS, 3, 0, authNone, nil)
	out := append([]byte{0x80, 0, 0, byte(len(rec))}, rec...)
	if _, err := nc.Write(out); err != nil {
		return false, nil // closed under us
	}
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

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

// emfileListener fails its first n Accepts as a process out of file
// descriptors does.
type emfileListener struct {
	net.Listener
	mu sync.Mutex
	n  int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	fail := l.n > 0
	l.n--
	l.mu.Unlock()
	if fail {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Serve keeps serving through EMFILE from accept.
func TestAcceptEMFILE(t *testing.T) {
	s, err := New(Options{Branches: fakeStore(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), &emfileListener{Listener: ln, n: 6}) }()
	if ok, err := nullCall(ln.Addr().String(), nil); err != nil || !ok {
		t.Fatalf("not served after EMFILE: %v", err)
	}
	if n := s.Metrics().AcceptErrors; n != 6 {
		t.Errorf("AcceptErrors = %d, want 6", n)
	}
	s.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// At most MaxConnections connections are served at once.
func TestMaxConnections(t *testing.T) {
	s, addr := startServer(t, fakeStore(), func(s *Server) { s.opts.MaxConnections = 2 })
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, c := range []*rawClient{a, b} {
		if r := c.call(progNFS, 3, 0, authNone, nil); r.stat != acceptSuccess {
			t.Fatal("NULL failed")
		}
	}
	if ok, err := nullCall(addr, nil); err != nil || ok {
		t.Fatalf("third connection served (err %v)", err)
	}
	if n := s.Metrics().Refused; n != 1 {
		t.Fatalf("Refused = %d, want 1", n)
	}
	a.nc.Close()
	// Once a's connection is gone, a new one is served.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := nullCall(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served after one closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := b.call(progNFS, 3, 0, authNone, nil); r.stat != acceptSuccess {
		t.Fatal("NULL on b failed")
	}
}

// waitClosed reads from nc until the server closes it.
func waitClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

// A client that starts a request and never finishes it loses its
// connection after RecordTimeout, while others are served.
func TestSlowRecordClosed(t *testing.T) {
	s, addr := startServer(t, fakeStore(), func(s *Server) { s.opts.RecordTimeout = 200 * time.Millisecond })
	good := dialRaw(t, addr)
	for _, partial := range [][]byte{
		{0x80, 0},                           // half a record mark
		{0x80, 0, 0, 100, 1, 2, 3, 4, 5, 6}, // 6 of 100 bytes
	} {
		slow, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		if _, err := slow.Write(partial); err != nil {
			t.Fatal(err)
		}
		if r := good.call(progNFS, 3, 0, authNone, nil); r.stat != acceptSuccess {
			t.Fatal("NULL on another connection failed")
		}
		waitClosed(t, slow)
	}
	if n := s.Metrics().SlowRecords; n != 2 {
		t.Errorf("SlowRecords = %d, want 2", n)
	}
}

// A connection without requests for IdleTimeout is closed.
func TestIdleConnectionClosed(t *testing.T) {
	_, addr := startServer(t, fakeStore(), func(s *Server) { s.opts.IdleTimeout = 200 * time.Millisecond })
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rec := callMsg(7, 2, progNFS, 3, 0, authNone, nil)
	if _, err := nc.Write(append([]byte{0x80, 0, 0, byte(len(rec))}, rec...)); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 4+24)
	if _, err := io.ReadFull(nc, reply); err != nil {
		t.Fatalf("NULL: %v", err)
	}
	waitClosed(t, nc)
}

// Clients that send 1 MiB READs and never read the replies hold at most
// Options.MaxCallMemory of the server's memory between them; a fresh
// client is still served (a connection whose replies stay unread is
// closed once others wait for memory); and when the clients are gone,
// their memory comes back.
func TestCallMemoryBounded(t *testing.T) {
	const budget = 8 << 20
	m := newManager(t, "")
	s, addr := startServer(t, m, func(s *Server) {
		s.opts.MaxCallMemory = budget
		s.mem.init(budget)
		s.stallAfter = 200 * time.Millisecond
	})
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
	if _, _, st := k.read(fh, 0, maxIO); st != 0 { // the store's caches fill
		t.Fatalf("READ: %d", st)
	}

	before := heapInuse()
	const hogs, calls = 24, 64 // 1.5 GiB of replies
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
		defer hog.Close()
		hog.(*net.TCPConn).SetReadBuffer(16 << 10)
		if _, err := hog.Write(flood); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, hog)
	}
	// Sample the heap while the hogs' calls are read and stuck.
	var maxGrown int64
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		maxGrown = max(maxGrown, int64(heapInuse())-int64(before))
	}

	// A fresh client is served.
	data, _, st := k.read(fh, 0, maxIO)
	must(t, st, "READ by another client")
	if len(data) != maxIO || data[12345] != chunk[12345] {
		t.Fatalf("READ by another client returned %d bytes", len(data))
	}
	maxGrown = max(maxGrown, int64(heapInuse())-int64(before))

	for _, hog := range conns {
		hog.Close()
	}
	settle(t, s)
	deadline := time.Now().Add(60 * time.Second)
	for {
		mt := s.Metrics()
		if mt.CallMemory == 0 && mt.OpenConnections == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hogs' memory never came back: %d bytes held, %d connections open", mt.CallMemory, mt.OpenConnections)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mt := s.Metrics()
	t.Logf("calls read: %d of %d; call memory peak %d KiB of %d; heap grew by at most %d MiB; throttled %d, stalled writes %d, dropped %d",
		mt.Requests, hogs*calls, mt.CallMemoryPeak>>10, budget>>10, maxGrown>>20, mt.Throttled, mt.StalledWrites, mt.DroppedCalls)
	if mt.CallMemoryPeak > budget {
		t.Fatalf("call memory peaked at %d bytes, over the budget of %d", mt.CallMemoryPeak, budget)
	}
	// The calls of a connection that is gone are not read: most of
	// the hogs' calls never were.
	if mt.Requests >= hogs*calls/2 {
		t.Fatalf("%d of the hogs' %d calls were read and run", mt.Requests, hogs*calls)
	}
	if mt.CallMemoryPeak == 0 || mt.Throttled == 0 {
		t.Fatalf("call memory never used (peak %d) or never full (throttled %d)", mt.CallMemoryPeak, mt.Throttled)
	}
	// The budget, the hogs' read buffers and pools' slack.
	if maxGrown > budget+24<<20 {
		t.Fatalf("heap grew by %d MiB for clients that do not read their replies, with a budget of %d MiB", maxGrown>>20, budget>>20)
	}
	// The fresh client still works.
	if _, _, st := k.read(fh, 0, 4096); st != 0 {
		t.Fatalf("READ after the hogs left: %d", st)
	}
}

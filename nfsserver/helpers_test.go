package nfsserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// fakeBranches serves only the synthetic root: it lists branches but has
// no views. Enough for RPC-level tests that need no store.
type fakeBranches struct {
	infos []branches.Info
}

func (f *fakeBranches) View(name string) (*cowfs.View, branches.Info, error) {
	return nil, branches.Info{}, branches.ErrNotFound
}

func (f *fakeBranches) ViewByID(id branches.BranchID) (*cowfs.View, branches.Info, error) {
	return nil, branches.Info{}, branches.ErrNotFound
}

func (f *fakeBranches) Live() []branches.Info { return f.infos }

func (f *fakeBranches) Secret() []byte { return bytes.Repeat([]byte{7}, 32) }

// testLogger sends server logs to the test output.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// startServer serves b on a loopback port until the test ends.
func startServer(tb testing.TB, b Branches, tweak func(*Server)) (*Server, string) {
	tb.Helper()
	s, err := New(Options{Branches: b, Logger: testLogger(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	if tweak != nil {
		tweak(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	tb.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(tb testing.TB) (server, client net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return dialAccept(tb, ln)
}

// dialAccept dials ln and accepts the connection: both ends, closed when
// the test ends.
func dialAccept(tb testing.TB, ln net.Listener) (server, client net.Conn) {
	tb.Helper()
	client, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { server.Close() })
	return server, client
}

// rawClient speaks RPC over one TCP connection and matches replies by XID.
type rawClient struct {
	tb  testing.TB
	nc  net.Conn
	wmu sync.Mutex

	mu      sync.Mutex
	xid     uint32
	pending map[uint32]chan []byte
	order   []uint32 // xids in the order replies arrived
	err     error
}

func dialRaw(tb testing.TB, addr string) *rawClient {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	c := &rawClient{tb: tb, nc: nc, xid: 1000, pending: map[uint32]chan []byte{}}
	go c.readLoop()
	tb.Cleanup(func() { nc.Close() })
	return c
}

func (c *rawClient) readLoop() {
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
			c.fail(err)
			return
		}
		h := binary.BigEndian.Uint32(hdr[:])
		if h&0x80000000 == 0 {
			c.fail(io.ErrUnexpectedEOF) // the server never fragments replies
			return
		}
		b := make([]byte, h&0x7fffffff)
		if _, err := io.ReadFull(c.nc, b); err != nil {
			c.fail(err)
			return
		}
		xid := binary.BigEndian.Uint32(b)
		c.mu.Lock()
		ch := c.pending[xid]
		delete(c.pending, xid)
		c.order = append(c.order, xid)
		c.mu.Unlock()
		if ch != nil {
			ch <- b
		}
	}
}

func (c *rawClient) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	for x, ch := range c.pending {
		close(ch)
		delete(c.pending, x)
	}
}

func (c *rawClient) nextXID() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.xid++
	return c.xid
}

// expect registers interest in the reply to xid.
func (c *rawClient) expect(xid uint32) chan []byte {
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.err != nil {
		close(ch)
	} else {
		c.pending[xid] = ch
	}
	c.mu.Unlock()
	return ch
}

// writeRecord sends b as one record of one fragment.
func (c *rawClient) writeRecord(b []byte) {
	c.writeFragments(b, len(b)+1)
}

// writeFragments sends b as one record cut in fragments of size n.
func (c *rawClient) writeFragments(b []byte, n int) {
	var out []byte
	for len(b) > 0 || out == nil {
		k := min(n, len(b))
		h := uint32(k)
		if k == len(b) {
			h |= 0x80000000
		}
		out = binary.BigEndian.AppendUint32(out, h)
		out = append(out, b[:k]...)
		b = b[k:]
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.nc.Write(out); err != nil {
		c.tb.Errorf("write: %v", err)
	}
}

// wait returns the reply on ch (failing the test after a generous bound,
// so a lost reply cannot hang the suite).
func (c *rawClient) wait(ch chan []byte) []byte {
	c.tb.Helper()
	select {
	case b, ok := <-ch:
		if !ok {
			c.tb.Fatalf("connection closed before reply: %v", c.err)
		}
		return b
	case <-time.After(60 * time.Second):
		c.tb.Fatal("no reply")
	}
	return nil
}

// auth is an RPC credential.
type auth struct {
	flavor uint32
	body   []byte
}

var authNone = auth{flavor: authNull}

func authSys(uid, gid uint32, gids ...uint32) auth {
	var e encoder
	e.u32(12345) // stamp
	e.string("testhost")
	e.u32(uid)
	e.u32(gid)
	e.u32(uint32(len(gids)))
	for _, g := range gids {
		e.u32(g)
	}
	return auth{flavor: authUnix, body: e.b}
}

var authRoot = authSys(0, 0)

// callMsg builds a call record.
func callMsg(xid, rpcvers, prog, vers, proc uint32, cr auth, args []byte) []byte {
	var e encoder
	e.u32(xid)
	e.u32(msgCall)
	e.u32(rpcvers)
	e.u32(prog)
	e.u32(vers)
	e.u32(proc)
	e.u32(cr.flavor)
	e.opaque(cr.body)
	e.u32(authNull)
	e.u32(0)
	e.b = append(e.b, args...)
	return e.b
}

// reply is a parsed RPC reply.
type reply struct {
	xid      uint32
	denied   bool
	stat     uint32   // accept_stat, or reject_stat when denied
	body     *decoder // results (accepted, SUCCESS) or mismatch info
	rawBytes []byte
}

func parseReply(tb testing.TB, b []byte) reply {
	tb.Helper()
	d := &decoder{b: b}
	r := reply{rawBytes: b}
	r.xid = d.u32()
	if mt := d.u32(); mt != msgReply {
		tb.Fatalf("message type %d, want reply", mt)
	}
	switch d.u32() {
	case replyAccepted:
		d.u32()
		d.opaque(maxAuthBody)
		r.stat = d.u32()
	case replyDenied:
		r.denied = true
		r.stat = d.u32()
	default:
		tb.Fatal("bad reply_stat")
	}
	if d.err != nil {
		tb.Fatalf("short reply: %x", b)
	}
	r.body = d
	return r
}

// call sends one call and returns its parsed reply.
func (c *rawClient) call(prog, vers, proc uint32, cr auth, args []byte) reply {
	c.tb.Helper()
	xid := c.nextXID()
	ch := c.expect(xid)
	c.writeRecord(callMsg(xid, rpcVersion, prog, vers, proc, cr, args))
	r := parseReply(c.tb, c.wait(ch))
	if r.xid != xid {
		c.tb.Fatalf("reply xid %d, want %d", r.xid, xid)
	}
	return r
}

// nfs calls an NFSv3 procedure as cr and returns the results after
// checking the call was accepted.
func (c *rawClient) nfs(proc uint32, cr auth, args []byte) *decoder {
	c.tb.Helper()
	r := c.call(progNFS, versNFS, proc, cr, args)
	if r.denied || r.stat != acceptSuccess {
		c.tb.Fatalf("nfs proc %d: denied=%v stat=%d", proc, r.denied, r.stat)
	}
	return r.body
}

func (c *rawClient) mount(proc uint32, args []byte) *decoder {
	c.tb.Helper()
	r := c.call(progMount, versMount, proc, authRoot, args)
	if r.denied || r.stat != acceptSuccess {
		c.tb.Fatalf("mount proc %d: denied=%v stat=%d", proc, r.denied, r.stat)
	}
	return r.body
}

// mnt mounts path and returns the root handle (failing the test unless
// the mount succeeds).
func (c *rawClient) mnt(path string) []byte {
	c.tb.Helper()
	var e encoder
	e.string(path)
	d := c.mount(1, e.b)
	if st := d.u32(); st != 0 {
		c.tb.Fatalf("MNT %q: status %d", path, st)
	}
	fh := d.opaque(fhSize)
	if d.err != nil {
		c.tb.Fatal("short MNT reply")
	}
	return append([]byte(nil), fh...)
}

// args builds XDR arguments from a list of values: uint32, uint64, bool,
// string, []byte (opaque), [8]byte (fixed).
func args(vals ...any) []byte {
	var e encoder
	for _, v := range vals {
		switch v := v.(type) {
		case uint32:
			e.u32(v)
		case int:
			e.u32(uint32(v))
		case uint64:
			e.u64(v)
		case bool:
			e.bool(v)
		case string:
			e.string(v)
		case []byte:
			e.opaque(v)
		case [8]byte:
			e.fixed(v[:])
		default:
			panic("args: unsupported type")
		}
	}
	return e.b
}

// fattr is a decoded fattr3.
type fattr struct {
	typ, mode, nlink, uid, gid uint32
	size, used                 uint64
	rdev1, rdev2               uint32
	fsid, fileid               uint64
	atime, mtime, ctime        [2]uint32
}

func readFattr(d *decoder) fattr {
	var a fattr
	a.typ, a.mode, a.nlink, a.uid, a.gid = d.u32(), d.u32(), d.u32(), d.u32(), d.u32()
	a.size, a.used = d.u64(), d.u64()
	a.rdev1, a.rdev2 = d.u32(), d.u32()
	a.fsid, a.fileid = d.u64(), d.u64()
	for _, t := range []*[2]uint32{&a.atime, &a.mtime, &a.ctime} {
		t[0], t[1] = d.u32(), d.u32()
	}
	return a
}

func readPostOp(d *decoder) *fattr {
	if !d.bool() {
		return nil
	}
	a := readFattr(d)
	return &a
}

func skipWcc(d *decoder) {
	if d.bool() {
		d.u64()
		d.u64()
		d.u64()
	}
	readPostOp(d)
}

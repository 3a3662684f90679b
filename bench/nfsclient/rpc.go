package nfsclient

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"

	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// transport is one TCP connection carrying ONC RPC calls (RFC 5531, record
// marking of RFC 1831 section 10), pipelined: calls from several goroutines
// are written whole, one at a time, and one goroutine reads the replies and
// hands each to its caller by XID.
//
// It reads the data of a READ reply straight from the socket into the
// caller's buffer: a client that allocated a buffer per reply (as the
// transport of go-nfs-client does) would spend the benchmark's time on its
// own allocations and the page faults of fresh memory, in some runs more
// than others, and with the server sharing the machine's cores.
type transport struct {
	nc  net.Conn
	br  *bufio.Reader
	xid atomic.Uint32

	wmu sync.Mutex // held while a call is written

	mu      sync.Mutex
	pending map[uint32]*pendingCall
	err     error // set once the connection failed; every later call fails with it
}

// pendingCall is a call written and not yet answered.
type pendingCall struct {
	readDst []byte // a READ's buffer for its data; nil for other calls
	body    []byte // the reply's result, after the accept status (a READ's without its data)
	n       int    // a READ's data bytes read into readDst
	err     error
	done    chan struct{}
}

// callMsg is an RPC call message; Body starts with an rpc.Header.
type callMsg struct {
	Xid     uint32
	Msgtype uint32
	Body    any
}

// fattr3Size is the XDR size of fattr3 (RFC 1813, 2.6).
const fattr3Size = 84

func dialTransport(addr string) (*transport, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	t := &transport{nc: nc, br: bufio.NewReaderSize(nc, 256<<10), pending: map[uint32]*pendingCall{}}
	t.xid.Store(rand.Uint32()) // each connection's XIDs start elsewhere, as clients' do
	go t.readLoop()
	return t, nil
}

func (t *transport) Close() error {
	err := t.nc.Close()
	t.fail(net.ErrClosed)
	return err
}

// fail ends every pending call with err, and every later one.
func (t *transport) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
	for xid, c := range t.pending {
		c.err = t.err
		close(c.done)
		delete(t.pending, xid)
	}
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// call sends args (which start with an rpc.Header) and waits for the reply:
// it returns the result after a successful accept status. With readDst
// (a READ), the data of a successful READ is read into readDst and n says
// how much; body then holds the result without the data.
func (t *transport) call(args any, readDst []byte) (body []byte, n int, err error) {
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	buf.Write([]byte{0, 0, 0, 0}) // record mark, set below
	xid := t.xid.Add(1)
	if err := xdr.Write(buf, &callMsg{Xid: xid, Body: args}); err != nil {
		return nil, 0, err
	}
	b := buf.Bytes()
	binary.BigEndian.PutUint32(b, 0x80000000|uint32(len(b)-4))

	c := &pendingCall{readDst: readDst, done: make(chan struct{})}
	t.mu.Lock()
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		return nil, 0, err
	}
	t.pending[xid] = c
	t.mu.Unlock()

	t.wmu.Lock()
	_, err = t.nc.Write(b)
	t.wmu.Unlock()
	if err != nil {
		t.nc.Close()
		t.fail(err)
	}
	<-c.done
	return c.body, c.n, c.err
}

// readLoop reads replies until the connection fails.
func (t *transport) readLoop() {
	r := &recordReader{br: t.br}
	for {
		if err := t.readReply(r); err != nil {
			t.nc.Close()
			t.fail(fmt.Errorf("rpc: %w", err))
			return
		}
	}
}

func (t *transport) readReply(r *recordReader) error {
	if err := r.next(); err != nil {
		return err
	}
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	xid, mtype := binary.BigEndian.Uint32(h[:]), binary.BigEndian.Uint32(h[4:])
	t.mu.Lock()
	c := t.pending[xid]
	delete(t.pending, xid)
	t.mu.Unlock()
	if c == nil {
		return r.skip() // not a call of ours: drop it
	}
	if mtype != 1 {
		c.err = fmt.Errorf("rpc: message type %d in answer to a call", mtype)
	} else {
		c.err = t.readResult(r, c)
	}
	close(c.done)
	return r.skip()
}

// readResult reads the rest of a reply for c: the reply status, and the
// result or why there is none.
func (t *transport) readResult(r *recordReader, c *pendingCall) error {
	u32 := func() (uint32, error) {
		var b [4]byte
		_, err := io.ReadFull(r, b[:])
		return binary.BigEndian.Uint32(b[:]), err
	}
	stat, err := u32()
	if err != nil {
		return err
	}
	if stat != rpc.MsgAccepted {
		reject, _ := u32()
		return fmt.Errorf("rpc: call denied (reject_stat %d)", reject)
	}
	if _, err := u32(); err != nil { // verifier flavor
		return err
	}
	vlen, err := u32()
	if err != nil {
		return err
	}
	if _, err := io.CopyN(io.Discard, r, int64(vlen+(4-vlen%4)%4)); err != nil {
		return err
	}
	accept, err := u32()
	if err != nil {
		return err
	}
	if accept != rpc.Success {
		return fmt.Errorf("rpc: call not run (accept_stat %d)", accept)
	}
	if c.readDst == nil {
		c.body, err = io.ReadAll(r)
		return err
	}
	// READ: status, then attributes, count, eof and the data's length
	// before the data.
	head := make([]byte, 4, 4+4+fattr3Size+12)
	if _, err := io.ReadFull(r, head); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(head) != 0 {
		rest, err := io.ReadAll(r)
		c.body = append(head, rest...)
		return err
	}
	head = head[:8]
	if _, err := io.ReadFull(r, head[4:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(head[4:]) != 0 {
		head = head[:8+fattr3Size]
		if _, err := io.ReadFull(r, head[8:]); err != nil {
			return err
		}
	}
	at := len(head)
	head = head[:at+12]
	if _, err := io.ReadFull(r, head[at:]); err != nil {
		return err
	}
	l := int(binary.BigEndian.Uint32(head[at+8:]))
	if l > len(c.readDst) {
		return fmt.Errorf("nfs READ: %d bytes returned for %d asked", l, len(c.readDst))
	}
	if _, err := io.ReadFull(r, c.readDst[:l]); err != nil {
		return err
	}
	c.body, c.n = head, l
	return nil
}

// recordReader reads one RPC record at a time from a stream of record
// fragments: Read returns io.EOF at the end of the record.
type recordReader struct {
	br   *bufio.Reader
	left uint32 // bytes left in the current fragment
	last bool   // the current fragment is the record's last
}

// next starts the next record.
func (r *recordReader) next() error {
	r.left, r.last = 0, false
	return r.fragment()
}

func (r *recordReader) fragment() error {
	var m [4]byte
	if _, err := io.ReadFull(r.br, m[:]); err != nil {
		return err
	}
	v := binary.BigEndian.Uint32(m[:])
	r.left, r.last = v&0x7fffffff, v&0x80000000 != 0
	return nil
}

func (r *recordReader) Read(p []byte) (int, error) {
	for r.left == 0 {
		if r.last {
			return 0, io.EOF
		}
		if err := r.fragment(); err != nil {
			return 0, noEOF(err)
		}
	}
	if uint32(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.br.Read(p)
	r.left -= uint32(n)
	return n, noEOF(err)
}

// skip discards the rest of the record.
func (r *recordReader) skip() error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// noEOF: the stream ending inside a record is an error, not its end.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

package nfsserver

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/lograte"
	"golang.org/x/sys/unix"
)

// Branches is what the server needs from the branch store.
// *branches.Manager satisfies it.
type Branches interface {
	// View returns the live view of a branch by name. Errors match
	// branches.ErrNotFound, ErrStale or ErrInvalidated with errors.Is.
	View(name string) (*cowfs.View, branches.Info, error)
	// ViewByID is View by branch id (NFS handles carry the id).
	ViewByID(id branches.BranchID) (*cowfs.View, branches.Info, error)
	// Live lists the live branches, cheaply (called on every request of
	// the root export).
	Live() []branches.Info
	// Secret returns the store's 32-byte key for the MACs on file handles.
	Secret() []byte
}

var _ Branches = (*branches.Manager)(nil)

// Options configures a Server. The zero value means defaults, except
// Branches, which is required.
type Options struct {
	Branches Branches
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// AnonUID and AnonGID are the identity of AUTH_NULL callers; 0 means
	// 65534 (nobody). Root cannot be chosen as the anonymous identity.
	AnonUID, AnonGID uint32
	// AllowUIDs are the users whose processes may connect (Linux only):
	// a connection from a privileged source port (the kernel's NFS client)
	// is always served; one from an unprivileged port only if the peer
	// socket, looked up in /proc/net/tcp and tcp6, belongs to one of
	// these uids. Others are refused and logged (the first refusal, then
	// one line every lograte.Every with the count of the rest). nil means the server's
	// effective uid and root. macOS cannot tell (README, "Guarantees").
	AllowUIDs []uint32
	// MaxConnections caps the open connections; more are closed at once,
	// with a log line. 0 means DefaultMaxConnections.
	MaxConnections int
	// IdleTimeout closes a connection on which no request arrived for
	// that long (clients reconnect when they need to); 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// RecordTimeout closes a connection when a request, once its first
	// byte arrived, is not whole within that time (a slow or stuck client
	// cannot hold a connection forever); 0 means DefaultRecordTimeout.
	RecordTimeout time.Duration
	// AdaptProcs lets the server set the Go runtime's processors
	// (GOMAXPROCS, process-wide) to one while its calls arrive one at a
	// time, and back as soon as two overlap (procs.go). A program that
	// runs other work beside the server should leave it off.
	AdaptProcs bool
	// MaxCallMemory bounds the memory of the calls read and of the
	// replies not yet written, all connections together (memory.go):
	// a connection reads its next call only once the call's buffers fit.
	// 0 means DefaultMaxCallMemory.
	MaxCallMemory int64
	// KeepPacing leaves a loopback connection's TCP congestion control
	// as the system chose it. By default, on Linux, a loopback connection
	// whose congestion control paces its sending (bbr) is switched to
	// reno (pacing.go).
	KeepPacing bool
}

// Defaults of Options.
const (
	DefaultMaxConnections = 1024
	DefaultIdleTimeout    = 30 * time.Minute
	DefaultRecordTimeout  = 2 * time.Minute
)

// EnsureDefaults fills in the zero fields of o.
func (o *Options) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.AnonUID == 0 {
		o.AnonUID = 65534
	}
	if o.AnonGID == 0 {
		o.AnonGID = 65534
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.RecordTimeout <= 0 {
		o.RecordTimeout = DefaultRecordTimeout
	}
	if o.MaxCallMemory <= 0 {
		o.MaxCallMemory = DefaultMaxCallMemory
	}
	if o.AllowUIDs == nil {
		o.AllowUIDs = []uint32{0}
		if uid := os.Geteuid(); uid != 0 {
			o.AllowUIDs = append(o.AllowUIDs, uint32(uid))
		}
	}
}

// Protocol limits advertised in FSINFO and enforced on requests.
const (
	maxIO         = 1 << 20        // rtmax = wtmax = 1 MiB
	maxRecord     = maxIO + 64<<10 // largest RPC record accepted
	maxInFlight   = 32             // concurrent requests per connection
	writeDeadline = 2 * time.Minute
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("nfsserver: server closed")

// Server serves NFSv3 and MOUNT v3 for every live branch on one port.
type Server struct {
	opts      Options // read only
	log       *slog.Logger
	secret    []byte
	writeVerf [8]byte // changes with every server start
	started   time.Time

	// testHook, when set, runs before every procedure (tests inject panics).
	testHook func(prog, proc uint32)
	// activity is told of the calls that do work (workProcs); nil when
	// the Branches do not listen (ActivityNoter).
	activity ActivityNoter

	closeCh chan struct{}  // closed by Close
	serving sync.WaitGroup // Serve calls running

	macs    sync.Pool    // of *hash.Hash keyed with secret
	handles *handleCache // nil: no cache (servers built by tests without New)
	mounts  mountTable
	root    rootState
	metrics counters
	mem     callMemory // memory of calls and unwritten replies (memory.go)
	// stallAfter is how long a write of replies may take while other
	// connections wait for memory (defaultStallAfter; tests shorten it).
	stallAfter time.Duration
	refusals   lograte.Limiter // limits the log lines of refused connections
	inline     inlineWatch
	workers    workers
	procs      *procGovernor // nil unless Options.AdaptProcs (and more than one processor)

	mu     sync.Mutex // protects the following
	conns  map[*conn]struct{}
	closed bool
}

// New returns a server for opts.
func New(opts Options) (*Server, error) {
	if opts.Branches == nil {
		return nil, errors.New("nfsserver: Options.Branches is required")
	}
	opts.EnsureDefaults()
	secret := opts.Branches.Secret()
	if len(secret) < 16 {
		return nil, fmt.Errorf("nfsserver: handle secret is %d bytes, need at least 16", len(secret))
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		secret:  append([]byte(nil), secret...),
		started: time.Now(),
		closeCh: make(chan struct{}),
		conns:   make(map[*conn]struct{}),
		handles: new(handleCache),
	}
	if _, err := rand.Read(s.writeVerf[:]); err != nil {
		return nil, fmt.Errorf("nfsserver: write verifier: %w", err)
	}
	s.mounts.init()
	s.mem.init(opts.MaxCallMemory)
	s.stallAfter = defaultStallAfter
	s.workers = workers{calls: make(chan func()), stop: s.closeCh}
	if opts.AdaptProcs {
		if s.procs = newProcGovernor(nil); s.procs != nil {
			go s.procs.watch(s.closeCh, procsTick, int(procsQuiet/procsTick))
		}
	}
	s.root.mtime = s.started
	s.activity, _ = opts.Branches.(ActivityNoter)
	return s, nil
}

// ActivityNoter is implemented by Branches that want to know when clients
// work (*branches.Manager: its idle GC waits for a pause).
type ActivityNoter interface {
	NoteActivity()
}

var _ ActivityNoter = (*branches.Manager)(nil)

// workProcs are the NFS procedures that read or change data or names,
// told to Server.activity: SETATTR, READ, WRITE, CREATE, MKDIR, SYMLINK,
// MKNOD, REMOVE, RMDIR, RENAME, LINK, COMMIT. The rest are what clients
// also send while nobody works (attribute and access checks, lookups and
// listings of an open window, status polls).
const workProcs = 1<<2 | 1<<6 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12 | 1<<13 | 1<<14 | 1<<15 | 1<<21

// Serve accepts connections on ln and serves them until ctx is cancelled or
// Close is called; then it stops reading new requests, lets the requests in
// flight finish and closes its connections. It returns nil on such a
// shutdown and the accept error otherwise.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()

	stop := make(chan struct{})
	defer close(stop)
	stopping := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-s.closeCh:
		case <-stop:
			return
		}
		close(stopping)
		ln.Close()
	}()

	var mine sync.WaitGroup
	mySet := map[*conn]struct{}{}
	var acceptErr error
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-stopping:
			default:
				if temporaryAcceptError(err) {
					// Out of file descriptors or similar: wait and retry,
					// as net/http does (5 ms doubling to 1 s).
					backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
					s.metrics.acceptErrors.Add(1)
					s.log.Warn("nfs: accept failed; retrying", "err", err, "retry_in", backoff)
					select {
					case <-time.After(backoff):
					case <-stopping:
					}
					continue
				}
				acceptErr = err
			}
			break
		}
		backoff = 0
		if !s.opts.KeepPacing {
			s.unpaceLoopback(nc)
		}
		c := s.newConn(nc)
		s.mu.Lock()
		if len(s.conns) >= s.opts.MaxConnections {
			s.mu.Unlock()
			s.metrics.refused.Add(1)
			if ok, n := s.refusals.Allow(time.Now()); ok {
				s.log.Warn("nfs: connection refused: too many connections", "remote", c.remote, "max", s.opts.MaxConnections,
					"refused_unlogged", n)
			}
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		mySet[c] = struct{}{}
		s.mu.Unlock()
		mine.Add(1)
		go func() {
			defer mine.Done()
			if c.admit() {
				c.serve()
			}
			s.mu.Lock()
			delete(s.conns, c)
			delete(mySet, c)
			s.mu.Unlock()
		}()
	}
	s.mu.Lock()
	for c := range mySet {
		c.stopReading()
	}
	s.mu.Unlock()
	mine.Wait()
	return acceptErr
}

// Close stops every Serve call: no new connections or requests are
// accepted, requests in flight finish and get their replies. It returns once
// all Serve calls have returned.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closeCh)
	}
	s.mu.Unlock()
	s.serving.Wait()
	return nil
}

// conn is one client connection. Requests are read in order by one
// goroutine and handled by up to maxInFlight goroutines; each reply is
// written as one whole record, in completion order (clients match replies
// by XID), see send.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	sem    chan struct{}
	wg     sync.WaitGroup // requests in flight
	// readers counts the goroutines that took over reading from one whose
	// inline call ran long (handOffLocked); serve waits for them before wg.
	readers sync.WaitGroup

	// The call running on the reading goroutine (inline.go). Lock order:
	// imu is a leaf, never taken with Server.mu held.
	imu      sync.Mutex
	iRunning bool          // a call runs inline
	iHanded  bool          // and another goroutine reads the connection now
	iSeq     uint64        // calls run inline on this connection
	iSeen    uint64        // iSeq at the watcher's last look
	iReader  *bufio.Reader // the connection's reader, while iRunning

	// aloneRun counts the calls in a row, up to the last read, that
	// arrived with nothing else in flight or waiting. Used by the reading
	// goroutine only.
	aloneRun int

	broken atomic.Bool // a write failed; the connection is closed
	// gone is set when the client is gone (a write failed, or the read
	// ended): no more calls are read, and those not started are dropped.
	gone atomic.Bool
	// stopCh is closed (once, by quit) when the connection stops reading
	// or its client is gone: it wakes a reader waiting for memory.
	stopCh   chan struct{}
	quitOnce sync.Once
	// writeSince is when the write in progress began, in Unix
	// nanoseconds; 0 while none is (squeeze).
	writeSince atomic.Int64

	// Lock order: Server.mu, then wmu.
	wmu       sync.Mutex // protects the following
	drained   sync.Cond  // L is &wmu; signalled when held drops or stopping is set
	writing   bool       // a goroutine is writing queue
	queue     [][]byte   // reply records waiting to be written
	spare     [][]byte
	queueCost int64 // call memory (reserve) of the replies in queue
	held      int64 // call memory of the calls read and not yet answered
	stopping  bool  // stopReading was called

	wbufs [][]byte     // used by the writer only, outside wmu
	iov   []unix.Iovec // used by the writer only, outside wmu

	// used maps the id of each branch whose handles (of its own export,
	// not of "/") this connection used to the time, in Unix nanoseconds,
	// of the last use: *atomic.Int64 by branches.BranchID.
	used sync.Map
	// usedN counts the entries of used, at least, since the last look
	// for ended branches, which comes when it reaches usedPruneAt.
	usedMu      sync.Mutex // protects the following; a leaf
	usedN       int
	usedPruneAt int
}

// touch records a use of branch's handles. The uses of branches that
// ended go with them: each time the connection's record has doubled since
// the last look, touch drops them (a connection that lives across many
// branches keeps no record per ended branch).
func (c *conn) touch(b branches.BranchID) {
	now := time.Now().UnixNano()
	if v, ok := c.used.Load(b); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	t := new(atomic.Int64)
	t.Store(now)
	if v, loaded := c.used.LoadOrStore(b, t); loaded {
		v.(*atomic.Int64).Store(now)
		return
	}
	c.usedMu.Lock()
	defer c.usedMu.Unlock()
	if c.usedN++; c.usedN < c.usedPruneAt {
		return
	}
	c.usedN = 0
	c.used.Range(func(k, _ any) bool {
		if id := k.(branches.BranchID); id != b && c.s.branchEnded(id) {
			c.used.Delete(k)
		} else {
			c.usedN++
		}
		return true
	})
	c.usedPruneAt = max(2*c.usedN, minPrune)
}

func (s *Server) newConn(nc net.Conn) *conn {
	s.metrics.conns.Add(1)
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), sem: make(chan struct{}, maxInFlight), stopCh: make(chan struct{})}
	c.drained.L = &c.wmu
	return c
}

func (c *conn) stopReading() {
	c.wmu.Lock()
	c.stopping = true
	c.nc.SetReadDeadline(time.Now())
	c.drained.Broadcast()
	c.wmu.Unlock()
	c.quit()
}

func (c *conn) quit() { c.quitOnce.Do(func() { close(c.stopCh) }) }

// markGone notes that the client is gone: no more of its calls are read
// or started.
func (c *conn) markGone() {
	if c.gone.Swap(true) {
		return
	}
	c.wmu.Lock()
	c.drained.Broadcast()
	c.wmu.Unlock()
	c.quit()
}

// readDeadline sets the read deadline unless the connection stops reading
// (whose deadline, now, must stay).
func (c *conn) readDeadline(t time.Time) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.stopping {
		return false
	}
	c.nc.SetReadDeadline(t)
	return true
}

// temporaryAcceptError reports whether Accept may work again later: out
// of file descriptors or memory, or a connection aborted before accept.
func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// admit checks who connects (Options.AllowUIDs) and closes the connection
// of a peer that may not.
func (c *conn) admit() bool {
	local, ok1 := c.nc.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.nc.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return true // not TCP: an in-process listener
	}
	if err := checkPeer(local, remote, c.s.opts.AllowUIDs); err != nil {
		c.s.metrics.refused.Add(1)
		if ok, n := c.s.refusals.Allow(time.Now()); ok {
			c.s.log.Warn("nfs: connection refused", "remote", c.remote, "reason", err, "refused_unlogged", n)
		}
		c.nc.Close()
		return false
	}
	return true
}

func (c *conn) serve() {
	s := c.s
	s.metrics.openConns.Add(1)
	defer s.metrics.openConns.Add(-1)
	c.readCalls(bufio.NewReaderSize(connReader(c.nc), 64<<10))
	c.readers.Wait()
	c.wg.Wait()
	c.nc.Close()
}

// readCalls reads the connection's calls and starts each, until the
// connection ends or a call run here hands the reading to another
// goroutine (see runInline). One goroutine at a time reads br.
func (c *conn) readCalls(br *bufio.Reader) {
	s := c.s
	for !c.gone.Load() {
		// A connection may sit idle for IdleTimeout between requests;
		// once a request's first byte is in, all of it must arrive
		// within RecordTimeout.
		if br.Buffered() == 0 {
			if !c.readDeadline(time.Now().Add(s.opts.IdleTimeout)) {
				break
			}
			if _, err := br.Peek(1); err != nil {
				if isTimeout(err) && !c.isStopping() {
					s.log.Debug("nfs: closing idle connection", "remote", c.remote, "idle", s.opts.IdleTimeout)
					c.markGone()
				} else {
					c.readFailed(err)
				}
				break
			}
		}
		if !c.readDeadline(time.Now().Add(s.opts.RecordTimeout)) {
			break
		}
		// The call is read only once its memory fits (memory.go).
		hdr, err := peekCall(br)
		if err != nil {
			c.readFailed(err)
			break
		}
		cost, ok := c.reserve(callCost(hdr))
		if !ok {
			break
		}
		// The wait may have been long: the record's time starts now.
		if !c.readDeadline(time.Now().Add(s.opts.RecordTimeout)) {
			c.unreserve(cost)
			break
		}
		rec, oversize, err := readRecord(br)
		if err != nil {
			c.unreserve(cost)
			c.readFailed(err)
			break
		}
		alone := len(c.sem) == 0 && br.Buffered() == 0
		if alone {
			c.aloneRun++
		} else {
			c.aloneRun = 0
		}
		if alone && inlineCall(rec, c.aloneRun > oneAtATimeCalls) {
			// Nothing else in flight or waiting: a client that sends
			// one call at a time (the Linux client walking a tree).
			// A metadata read or a READ (see inlineCall) runs here,
			// without handing it to another goroutine (and thread)
			// and back.
			if c.runInline(br, rec, oversize, cost) {
				return
			}
			continue
		}
		c.sem <- struct{}{}
		c.wg.Add(1)
		s.metrics.inFlight.Add(1)
		s.procs.callStarted()
		s.workers.run(func() {
			defer func() {
				putBuf(rec)
				<-c.sem // before inFlight: at 0, the next call may run inline
				s.metrics.inFlight.Add(-1)
				c.wg.Done()
			}()
			c.handle(rec, oversize, cost)
		})
	}
}

// readFailed logs why the connection's read ended (a request that did
// not arrive whole in time, or an unexpected error) and, unless the
// server stops reading it, notes that its client is gone.
func (c *conn) readFailed(err error) {
	s := c.s
	if c.isStopping() {
		return
	}
	if isTimeout(err) {
		s.metrics.slowRecords.Add(1)
		s.log.Warn("nfs: closing connection: a request did not arrive whole in time", "remote", c.remote, "timeout", s.opts.RecordTimeout)
	} else {
		c.logReadError(err)
	}
	c.markGone()
}

// peekCall returns the record mark and the first bytes (up to callPeek)
// of the call at the front of br, without consuming them.
func peekCall(br *bufio.Reader) ([]byte, error) {
	h, err := br.Peek(4)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(h) & 0x7fffffff)
	return br.Peek(4 + min(n, callPeek))
}

func (c *conn) isStopping() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.stopping
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *conn) logReadError(err error) {
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrUnexpectedEOF) && !isTimeout(err) {
		c.s.log.Debug("nfs: connection read failed", "remote", c.remote, "err", err)
	}
}

// readRecord reads one RPC record (RFC 5531 record marking), reassembling
// its fragments. A record larger than maxRecord is read and discarded, all
// but its first bytes (enough for the call header), and reported oversize so
// the caller can answer GARBAGE_ARGS without allocating it.
func readRecord(r io.Reader) (rec []byte, oversize bool, err error) {
	const keep = 64
	buf := getBuf()
	var hdr [4]byte
	total := 0
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			putBuf(buf)
			return nil, false, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h & 0x7fffffff)
		if oversize || total+n > maxRecord {
			oversize = true
			k := min(n, max(0, keep-len(buf)))
			buf, err = appendRead(r, buf, k)
			if err == nil {
				_, err = io.CopyN(io.Discard, r, int64(n-k))
			}
		} else {
			buf, err = appendRead(r, buf, n)
		}
		if err != nil {
			putBuf(buf)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, false, err
		}
		total += n
		if h&0x80000000 != 0 {
			return buf, oversize, nil
		}
	}
}

func appendRead(r io.Reader, buf []byte, n int) ([]byte, error) {
	l := len(buf)
	buf = growBuf(buf, n)
	_, err := io.ReadFull(r, buf[l:l+n])
	return buf, err
}

// Buffers for records and replies come from pools by size class, so 64
// KiB and 1 MiB READs and WRITEs reuse buffers instead of allocating (and
// zeroing) fresh ones each time. The largest class holds any record or
// READ reply.
var bufClasses = [...]int{16 << 10, 160 << 10, maxRecord}

var bufPools [len(bufClasses)]sync.Pool

func getBuf() []byte { return getClassBuf(0) }

func getClassBuf(class int) []byte {
	if p, _ := bufPools[class].Get().(*[]byte); p != nil {
		return (*p)[:0]
	}
	return make([]byte, 0, bufClasses[class])
}

// growBuf extends buf by n bytes, moving it to a buffer of a larger class
// when needed (the old buffer goes back to its pool).
func growBuf(buf []byte, n int) []byte {
	l := len(buf)
	if need := l + n; cap(buf) < need {
		var nb []byte
		for class, c := range bufClasses {
			if c >= need {
				nb = getClassBuf(class)[:l]
				break
			}
		}
		if nb == nil { // cannot happen: records and replies are bounded
			nb = make([]byte, l, need)
		}
		copy(nb, buf)
		putBuf(buf)
		buf = nb
	}
	return buf[:l+n]
}

func putBuf(b []byte) {
	for class, c := range bufClasses {
		if cap(b) == c {
			b = b[:0]
			bufPools[class].Put(&b)
			return
		}
	}
}

// send queues a reply record whose first 4 bytes were reserved for the
// record mark, and takes ownership of b. Records are written whole and
// never interleave: one goroutine at a time (the "writer") writes, and
// replies that complete while it writes are sent by it in its next batch
// with one writev, which saves system calls when many requests are in
// flight and adds no delay when there is only one. cost is the call's
// memory (reserve), given back once the reply is written (or dropped).
func (c *conn) send(b []byte, cost int64) {
	binary.BigEndian.PutUint32(b, 0x80000000|uint32(len(b)-4))
	c.wmu.Lock()
	c.queue = append(c.queue, b)
	c.queueCost += cost
	if c.writing {
		c.wmu.Unlock()
		return
	}
	c.writing = true
	for len(c.queue) > 0 {
		batch, cost := c.queue, c.queueCost
		c.queue, c.queueCost = c.spare[:0], 0
		c.wmu.Unlock()
		var err error
		if !c.broken.Load() {
			// WriteTo consumes the slice it is given (it sets the
			// records it wrote to nil), so give it a copy: batch keeps
			// the buffers for the pool.
			c.wbufs = append(c.wbufs[:0], batch...)
			now := time.Now()
			c.writeSince.Store(now.UnixNano())
			c.nc.SetWriteDeadline(now.Add(writeDeadline))
			err = writeRecords(c.nc, c.wbufs, &c.iov)
			c.writeSince.Store(0)
			clear(c.wbufs)
		}
		for i, x := range batch {
			putBuf(x)
			batch[i] = nil
		}
		if err != nil && !c.broken.Swap(true) {
			if isTimeout(err) {
				c.s.metrics.stalledWrites.Add(1)
			}
			c.s.log.Debug("nfs: reply write failed; closing connection", "remote", c.remote, "err", err)
			c.nc.Close()
			c.markGone()
		}
		c.wmu.Lock()
		c.held -= cost
		c.s.mem.release(cost)
		c.drained.Broadcast()
		c.spare = batch[:0]
	}
	c.writing = false
	c.wmu.Unlock()
}

// writeBuffers writes every byte of bufs to nc, in order, with writev
// where nc supports it; it consumes bufs (net.Buffers.WriteTo).
func writeBuffers(nc net.Conn, bufs [][]byte) error {
	wb := net.Buffers(bufs)
	_, err := wb.WriteTo(nc)
	return err
}

// request is one decoded RPC call.
type request struct {
	prog   string // program name ("nfs", "mount"), for logs
	name   string // procedure name, for logs
	s      *Server
	remote string
	conn   *conn // nil in tests that call dispatch directly
	xid    uint32
	proc   uint32
	cred   cred
	ctx    context.Context
	// The call's decoder and the reply's encoder, allocated with the
	// request: one allocation per call for the three.
	dec decoder
	enc encoder
}

// op is the procedure's name for logs, such as "nfs.LOOKUP".
func (r *request) op() string { return r.prog + "." + r.name }

type procFunc func(r *request, d *decoder, e *encoder) error

type procInfo struct {
	name string
	fn   procFunc
}

// handle answers one RPC record.
// cost is the call's memory (reserve), given back once the reply is
// written. A call of a client that is gone is dropped.
func (c *conn) handle(rec []byte, oversize bool, cost int64) {
	if c.gone.Load() {
		c.s.metrics.dropped.Add(1)
		c.s.procs.callEnded()
		c.unreserve(cost)
		return
	}
	reply := c.s.dispatch(rec, oversize, c.remote, c)
	// Before the reply goes out: the client's next call may arrive
	// before this goroutine runs again.
	c.s.procs.callEnded()
	if reply != nil {
		c.send(reply, cost)
	} else {
		c.unreserve(cost)
	}
}

// dispatch decodes one RPC record, runs the procedure and returns the reply
// record (its first 4 bytes reserved for the record mark), or nil when the
// record is not a call and gets no reply.
func (s *Server) dispatch(rec []byte, oversize bool, remote string, c *conn) []byte {
	r := &request{s: s, remote: remote, conn: c, ctx: context.Background()}
	d := &r.dec
	d.b = rec
	xid := d.u32()
	mtype := d.u32()
	if d.err != nil || mtype != msgCall {
		s.log.Debug("nfs: dropping record that is not an RPC call", "remote", remote)
		return nil
	}
	s.metrics.requests.Add(1)
	e := &r.enc
	e.b = getBuf()
	e.u32(0) // record mark, filled in by send
	e.u32(xid)
	e.u32(msgReply)

	rpcvers := d.u32()
	prog, vers, proc := d.u32(), d.u32(), d.u32()
	credFlavor := d.u32()
	credBody := d.opaque(maxAuthBody)
	d.u32()
	d.opaque(maxAuthBody)
	if d.err == nil && rpcvers != rpcVersion {
		e.u32(replyDenied)
		e.u32(rejectRPCMismatch)
		e.u32(rpcVersion)
		e.u32(rpcVersion)
		return e.b
	}
	acceptHeader := func() {
		e.u32(replyAccepted)
		e.u32(authNull) // verifier
		e.u32(0)
	}
	if d.err != nil || oversize {
		s.metrics.garbage.Add(1)
		s.log.Warn("nfs: undecodable or oversized RPC call", "remote", remote, "xid", xid, "oversize", oversize)
		acceptHeader()
		e.u32(acceptGarbageArgs)
		return e.b
	}
	cr, ok := s.parseCred(credFlavor, credBody)
	if !ok {
		e.u32(replyDenied)
		e.u32(rejectAuthError)
		if credFlavor == authUnix {
			e.u32(authBadCred)
		} else {
			e.u32(authTooWeak)
		}
		return e.b
	}
	acceptHeader()
	statPos := len(e.b)

	var table []procInfo
	var progName string
	switch prog {
	case progNFS:
		table, progName = nfsProcs[:], "nfs"
	case progMount:
		table, progName = mountProcs[:], "mount"
	default:
		s.log.Debug("nfs: call for unknown program", "remote", remote, "prog", prog, "vers", vers)
		e.u32(acceptProgUnavail)
		return e.b
	}
	if vers != 3 {
		s.log.Debug("nfs: call for unsupported version", "remote", remote, "prog", progName, "vers", vers)
		e.u32(acceptProgMismatch)
		e.u32(3) // low
		e.u32(3) // high
		return e.b
	}
	if proc >= uint32(len(table)) {
		e.u32(acceptProcUnavail)
		return e.b
	}
	pi := table[proc]
	s.metrics.countProc(prog, proc)
	if prog == progNFS && s.activity != nil && workProcs&(1<<proc) != 0 {
		s.activity.NoteActivity()
	}
	e.u32(acceptSuccess)
	r.prog, r.name, r.xid, r.proc, r.cred = progName, pi.name, xid, proc, cr
	t0 := time.Now()
	s.invoke(r, pi, prog, d, e, statPos)
	if prog == progNFS {
		s.metrics.nfsNanos[proc].Add(uint64(time.Since(t0)))
	}
	if prog == progNFS && len(e.b) >= statPos+8 && binary.BigEndian.Uint32(e.b[statPos:]) == acceptSuccess &&
		binary.BigEndian.Uint32(e.b[statPos+4:]) != 0 {
		s.metrics.nfsErrors.Add(1)
	}
	return e.b
}

// invoke runs one procedure. A panic is recovered, logged and answered
// SYSTEM_ERR; undecodable arguments are answered GARBAGE_ARGS.
func (s *Server) invoke(r *request, pi procInfo, prog uint32, d *decoder, e *encoder, statPos int) {
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panics.Add(1)
			s.log.Error("nfs: panic in procedure (recovered)", "op", r.op(), "remote", r.remote,
				"xid", r.xid, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			e.b = e.b[:statPos]
			e.u32(acceptSystemErr)
		}
	}()
	if s.testHook != nil {
		s.testHook(prog, r.proc)
	}
	if err := pi.fn(r, d, e); err != nil {
		s.metrics.garbage.Add(1)
		s.log.Debug("nfs: garbage arguments", "op", r.op(), "remote", r.remote, "xid", r.xid)
		e.b = e.b[:statPos]
		e.u32(acceptGarbageArgs)
	}
}

// counters are the live metrics.
type counters struct {
	conns, refused, requests, garbage, panics atomic.Uint64
	unpaced                                   atomic.Uint64
	nfsErrors, throttled, acceptErrors        atomic.Uint64
	slowRecords, handOffs                     atomic.Uint64
	dropped, stalledWrites                    atomic.Uint64
	bytesRead, bytesWritten                   atomic.Uint64
	openConns, inFlight                       atomic.Int64
	nfs                                       [numNFSProcs]atomic.Uint64
	mount                                     [numMountProcs]atomic.Uint64
	nfsNanos                                  [numNFSProcs]atomic.Uint64 // time in each NFS procedure
}

func (m *counters) countProc(prog, proc uint32) {
	switch prog {
	case progNFS:
		m.nfs[proc].Add(1)
	case progMount:
		m.mount[proc].Add(1)
	}
}

// Metrics is a snapshot of the server's counters.
type Metrics struct {
	Connections     uint64            // accepted since start
	OpenConnections int64             // open now
	Refused         uint64            // connections refused (Options.AllowUIDs, MaxConnections)
	Throttled       uint64            // times a connection stopped being read until its replies drained
	AcceptErrors    uint64            // temporary accept failures (such as EMFILE), retried
	SlowRecords     uint64            // connections closed because a request did not arrive whole in time
	Unpaced         uint64            // loopback connections switched from a pacing congestion control (Options.KeepPacing)
	HandOffs        uint64            // calls run on a connection's reading goroutine that took long enough for another to take over the reading
	ProcsLowered    uint64            // times the Go runtime's processors were set to one (Options.AdaptProcs)
	ProcsRaised     uint64            // times they were set back
	CallMemory      int64             // bytes of calls read and replies not yet written, now (Options.MaxCallMemory)
	CallMemoryPeak  int64             // the most CallMemory has been
	DroppedCalls    uint64            // calls read from a client that was gone before they started, not run
	StalledWrites   uint64            // connections closed because their replies were not read (memory.go)
	Requests        uint64            // RPC calls received
	InFlight        int64             // being handled now
	GarbageArgs     uint64            // calls answered GARBAGE_ARGS
	Panics          uint64            // procedures that panicked (answered SYSTEM_ERR)
	NFSErrors       uint64            // NFS replies with a status other than NFS3_OK
	BytesRead       uint64            // file data returned by READ
	BytesWritten    uint64            // file data stored by WRITE
	Procedures      map[string]uint64 // calls per procedure, e.g. "nfs.READ", "mount.MNT"
	// ProcedureMicros is the time spent running each NFS procedure, from
	// its arguments decoded to its reply encoded (not queueing or sending),
	// in microseconds, e.g. "nfs.GETATTR".
	ProcedureMicros map[string]uint64
}

// Metrics returns a snapshot of the server's counters.
func (s *Server) Metrics() Metrics {
	m := &s.metrics
	out := Metrics{
		Connections:     m.conns.Load(),
		OpenConnections: m.openConns.Load(),
		Refused:         m.refused.Load(),
		Throttled:       m.throttled.Load(),
		AcceptErrors:    m.acceptErrors.Load(),
		SlowRecords:     m.slowRecords.Load(),
		Unpaced:         m.unpaced.Load(),
		HandOffs:        m.handOffs.Load(),
		DroppedCalls:    m.dropped.Load(),
		StalledWrites:   m.stalledWrites.Load(),
		Requests:        m.requests.Load(),
		InFlight:        m.inFlight.Load(),
		GarbageArgs:     m.garbage.Load(),
		Panics:          m.panics.Load(),
		NFSErrors:       m.nfsErrors.Load(),
		BytesRead:       m.bytesRead.Load(),
		BytesWritten:    m.bytesWritten.Load(),
		Procedures:      map[string]uint64{},
		ProcedureMicros: map[string]uint64{},
	}
	out.ProcsLowered, out.ProcsRaised = s.procs.counts()
	out.CallMemory, out.CallMemoryPeak = s.mem.usage()
	for i := range m.nfs {
		if n := m.nfs[i].Load(); n > 0 {
			out.Procedures["nfs."+nfsProcs[i].name] = n
			out.ProcedureMicros["nfs."+nfsProcs[i].name] = m.nfsNanos[i].Load() / 1000
		}
	}
	for i := range m.mount {
		if n := m.mount[i].Load(); n > 0 {
			out.Procedures["mount."+mountProcs[i].name] = n
		}
	}
	return out
}

package nfsserver

import (
	"bufio"
	"encoding/binary"
	"sync/atomic"
	"time"
)

// Calls run on a connection's reading goroutine.
//
// A client that sends one call at a time (the Linux client walking or
// untarring a tree) pays, for each call handed to a goroutine of its own,
// a wake-up of that goroutine and often of another thread. So a call
// arriving with nothing else in flight or waiting runs on the goroutine
// that read it, unless it is a large READ or WRITE (inlineCall). Such a call
// may still wait: for the disk, or for a lock. So that it does not hold
// up the calls behind it, one watcher goroutine per server looks at the
// calls running inline every inlineTick, and a call it sees running on
// two looks in a row gets its connection's reading handed to a new
// goroutine (handOffLocked); the call then counts as in flight like any
// other. A call that returns in time costs a lock and an atomic add; the
// watcher runs only while calls run inline, and stops after
// inlineIdleTicks without one. A timer per call would cost less to
// reason about but more to run: arming one wakes the thread sleeping in
// the network poller, on this path a wake-up per call.

const (
	// inlineTick is how often the watcher looks: a call running inline is
	// handed off after one to two ticks.
	inlineTick = 10 * time.Millisecond
	// inlineIdleTicks is how many ticks without a call run inline the
	// watcher waits before it stops.
	inlineIdleTicks = 100
)

// inlineWatch is the server's state of the watcher.
type inlineWatch struct {
	running atomic.Bool   // a watcher goroutine runs, or is about to
	calls   atomic.Uint64 // calls started inline, ever
}

// runInline runs the call rec on the reading goroutine, which reads br.
// If the watcher hands the reading to another goroutine meanwhile,
// runInline reports true and the caller stops reading.
func (c *conn) runInline(br *bufio.Reader, rec []byte, oversize bool, cost int64) (handedOff bool) {
	s := c.s
	s.metrics.inFlight.Add(1)
	s.procs.callStarted()
	c.imu.Lock()
	c.iRunning, c.iHanded, c.iReader = true, false, br
	c.iSeq++
	c.imu.Unlock()
	s.inline.calls.Add(1)
	if !s.inline.running.Load() && s.inline.running.CompareAndSwap(false, true) {
		go s.watchInline()
	}
	c.handle(rec, oversize, cost)
	c.imu.Lock()
	c.iRunning = false
	handedOff = c.iHanded
	c.iReader = nil
	c.imu.Unlock()
	putBuf(rec)
	if handedOff {
		<-c.sem // before inFlight: at 0, the next call may run inline
	}
	s.metrics.inFlight.Add(-1)
	if handedOff {
		c.wg.Done()
	}
	return handedOff
}

// checkInline hands c's reading off if the call running inline is the one
// the watcher saw there at its last look.
func (c *conn) checkInline() (running bool) {
	c.imu.Lock()
	defer c.imu.Unlock()
	if !c.iRunning || c.iHanded {
		return false
	}
	if c.iSeen == c.iSeq {
		c.handOffLocked()
		return false
	}
	c.iSeen = c.iSeq
	return true
}

// handOffLocked starts a goroutine that reads the connection in place of
// the one running its inline call, which then counts as in flight. Its
// slot in sem is free: a call runs inline only when no other is in
// flight, and only the reading goroutine takes slots. c.imu is held.
func (c *conn) handOffLocked() {
	c.iHanded = true
	c.s.metrics.handOffs.Add(1)
	c.sem <- struct{}{}
	c.wg.Add(1)
	c.readers.Add(1)
	br := c.iReader
	go func() {
		defer c.readers.Done()
		c.readCalls(br)
	}()
}

// watchInline is the watcher: see the top of this file.
func (s *Server) watchInline() {
	t := time.NewTicker(inlineTick)
	defer t.Stop()
	var conns []*conn
	last, idle := s.inline.calls.Load(), 0
	for {
		select {
		case <-t.C:
		case <-s.closeCh:
			s.inline.running.Store(false)
			return
		}
		s.mu.Lock()
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		pending := false
		for _, c := range conns {
			if c.checkInline() {
				pending = true
			}
		}
		clear(conns)
		conns = conns[:0]
		if n := s.inline.calls.Load(); n != last || pending {
			last, idle = n, 0
			continue
		}
		if idle++; idle < inlineIdleTicks {
			continue
		}
		// Stop, unless a call started since the last look: runInline
		// adds to calls before it looks at running.
		s.inline.running.Store(false)
		if s.inline.calls.Load() == last || !s.inline.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}

// inlineCall reports whether rec is an NFS call that serve may run on the
// connection's reading goroutine when nothing else is in flight: any but a
// READ or WRITE of more than inlineReadMax, which runs there only when
// oneAtATime (the client sends one call at a time). A call that runs long
// there, one waiting on an fsync or deleting a large file's blocks, gets
// the connection's reading handed to another goroutine (see the top of
// this file), so the calls behind it wait one to two inlineTicks at most.
// MOUNT calls, replies and records too short to name a procedure go to a
// goroutine of their own.
func inlineCall(rec []byte, oneAtATime bool) bool {
	if len(rec) < 24 || binary.BigEndian.Uint32(rec[4:]) != msgCall || binary.BigEndian.Uint32(rec[12:]) != progNFS {
		return false
	}
	switch binary.BigEndian.Uint32(rec[20:]) {
	case 6, 7: // READ, WRITE
		count, ok := readCount(rec)
		return ok && (count <= inlineReadMax || oneAtATime)
	}
	return true
}

// inlineReadMax is the largest READ or WRITE serve runs on the
// connection's reading goroutine whatever the client: a small file's
// whole content, a copy of some microseconds. A larger one, up to 1 MiB,
// takes hundreds of microseconds (and a READ from the disk milliseconds),
// during which the calls a client sends meanwhile wait to be read: it runs
// inline only for a client that sends one call at a time
// (oneAtATimeCalls), as nfs-cp does, whose next call waits for the reply
// anyway.
const inlineReadMax = 64 << 10

// oneAtATimeCalls is how many calls in a row must arrive with nothing
// else in flight or waiting on their connection before a large READ or
// WRITE runs inline there.
const oneAtATimeCalls = 4

// readCount returns the count of the NFS READ or WRITE call rec (both
// put it after the handle and the offset); ok false if rec is too short
// to hold one.
func readCount(rec []byte) (count uint32, ok bool) { return argAfterHandle(rec, 8) }

// argAfterHandle returns the 32-bit argument skip bytes after the file
// handle that starts the arguments of the NFS call rec; ok false if rec
// is too short to hold it.
func argAfterHandle(rec []byte, skip int) (arg uint32, ok bool) {
	at := 24      // xid, type, RPC version, program, version, procedure
	for range 2 { // the credential and the verifier: flavor, length, body
		if len(rec) < at+8 {
			return 0, false
		}
		n := binary.BigEndian.Uint32(rec[at+4:])
		if n > maxAuthBody {
			return 0, false
		}
		at += 8 + int(n+3)&^3
	}
	if len(rec) < at+4 {
		return 0, false
	}
	fh := binary.BigEndian.Uint32(rec[at:])
	if fh > fhSize {
		return 0, false
	}
	at += 4 + int(fh+3)&^3 + skip
	if len(rec) < at+4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(rec[at:]), true
}

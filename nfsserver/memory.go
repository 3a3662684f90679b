package nfsserver

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
)

// Memory of calls and replies.
//
// A call holds memory from the moment it is read until its reply is
// written: the pooled buffer of its record and that of its reply (a READ
// of 1 MiB, a buffer of maxRecord). Before a connection reads a call, it
// peeks at the call's first bytes (the record mark, the procedure and, for
// a READ or a READDIR, its count), charges that cost (callCost) to the
// connection and to the server, and reads the call only once both have
// room: a connection holds at most connCallMemory, all of them together
// Options.MaxCallMemory. A connection whose replies are not read stops
// being read (its client's sends block in TCP), and its memory comes back
// as its replies are written.
//
// Connections that hold memory may fill only three quarters of the
// server's budget; the last quarter is for connections that hold none,
// such as a new client's first call. So that clients which never read
// their replies cannot keep the rest waiting either, a connection that
// waits for memory shortens the write deadline of every connection whose
// write has been stuck: one whose write (of a batch of replies) has not
// finished stallAfter after it began is closed, and its memory freed
// (Metrics.StalledWrites).
//
// A connection whose client is gone (its write failed, or its read ended)
// reads no more calls, and a call it read but did not start yet is
// dropped unanswered (Metrics.DroppedCalls).

// DefaultMaxCallMemory is Options.MaxCallMemory's default.
const DefaultMaxCallMemory = 64 << 20

const (
	// connCallMemory is the most a connection holds, unless its one call
	// costs more (it is then read alone).
	connCallMemory = 16 << 20
	// callPeek is how many bytes of a call callCost looks at: the call
	// header with two credentials of maxAuthBody, a handle and the
	// arguments before a READDIRPLUS's maxcount.
	callPeek = 24 + 2*(8+maxAuthBody) + 4 + fhSize + 24
	// defaultStallAfter is how long a write of replies may take, while
	// other connections wait for memory, before its connection is closed.
	defaultStallAfter = 10 * time.Second
	// squeezeEvery is how often a connection waiting for memory looks for
	// stuck writes.
	squeezeEvery = time.Second
)

// callCost is the memory a call whose first bytes are hdr (its record
// mark, then as many bytes of the record as callPeek or the record holds)
// holds until its reply is written: the pool class of its record buffer
// and that of its reply.
func callCost(hdr []byte) int64 {
	mark := binary.BigEndian.Uint32(hdr)
	n, last := int(mark&0x7fffffff), mark&0x80000000 != 0
	rec := maxRecord // fragments: up to the largest record
	switch {
	case last && n > maxRecord:
		rec = 0 // discarded, all but its first bytes
	case last:
		rec = n
	}
	return int64(bufClass(rec) + bufClass(replySize(hdr[4:])))
}

// replySize estimates the size of the reply to the call whose first bytes
// are rec.
func replySize(rec []byte) int {
	const small = 1 << 10 // attributes and the like
	if len(rec) < 24 || binary.BigEndian.Uint32(rec[4:]) != msgCall {
		return small
	}
	proc := binary.BigEndian.Uint32(rec[20:])
	switch binary.BigEndian.Uint32(rec[12:]) {
	case progMount:
		return bufClasses[1] // EXPORT and DUMP list branches and mounts
	case progNFS:
		var count uint32
		var ok bool
		switch proc {
		case 6: // READ: handle, offset, count
			count, ok = argAfterHandle(rec, 8)
		case 16: // READDIR: handle, cookie, verifier, count
			count, ok = argAfterHandle(rec, 16)
		case 17: // READDIRPLUS: handle, cookie, verifier, dircount, maxcount
			count, ok = argAfterHandle(rec, 20)
		default:
			return small
		}
		if !ok {
			return maxRecord
		}
		return int(min(count, maxIO)) + small
	}
	return small
}

// bufClass is the capacity of the pooled buffer that holds n bytes.
func bufClass(n int) int {
	for _, c := range bufClasses {
		if c >= n {
			return c
		}
	}
	return maxRecord
}

// callMemory is the server's budget of call memory.
type callMemory struct {
	limit int64

	// Lock order: a leaf, taken with conn.wmu held.
	mu    sync.Mutex // protects the following
	used  int64
	peak  int64
	freed chan struct{} // closed, and replaced, when memory is released while waited for
	wait  bool          // someone got freed since it was last closed

	lastSqueeze atomic.Int64 // Unix nanoseconds
}

func (m *callMemory) init(limit int64) {
	m.limit = limit
	m.freed = make(chan struct{})
}

// maxCost is the most one call is charged: a call that costs more than
// a connection holding memory may take is charged that.
func (m *callMemory) maxCost() int64 { return m.limit - m.limit/4 }

// tryAcquire takes n bytes (at most maxCost) if they fit: in the whole
// budget for a connection that holds none, in three quarters of it for
// one that holds some. Otherwise it returns a channel closed when memory
// is released.
func (m *callMemory) tryAcquire(n int64, holding bool) (ok bool, freed <-chan struct{}) {
	limit := m.limit
	if holding {
		limit = m.maxCost()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.used+n > limit {
		m.wait = true
		return false, m.freed
	}
	m.used += n
	m.peak = max(m.peak, m.used)
	return true, nil
}

// release gives back n bytes taken by tryAcquire.
func (m *callMemory) release(n int64) {
	if n == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.used -= n
	if m.wait {
		m.wait = false
		close(m.freed)
		m.freed = make(chan struct{})
	}
}

func (m *callMemory) usage() (used, peak int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used, m.peak
}

// reserve takes the memory of a call that costs cost (callCost), for the
// connection and the server, waiting while either is full, and returns
// what it took (to give back with the reply). It reports false when the
// connection stops reading or its client is gone meanwhile.
func (c *conn) reserve(cost int64) (int64, bool) {
	s := c.s
	cost = min(cost, s.mem.maxCost())
	throttled := false
	c.wmu.Lock()
	for c.held > 0 && c.held+cost > connCallMemory && !c.stopping && !c.gone.Load() {
		if !throttled {
			throttled = true
			s.metrics.throttled.Add(1)
		}
		c.drained.Wait()
	}
	holding := c.held > 0
	ok := !c.stopping && !c.gone.Load()
	c.wmu.Unlock()
	if !ok {
		return 0, false
	}
	var tick *time.Timer
	for {
		got, freed := s.mem.tryAcquire(cost, holding)
		if got {
			break
		}
		if !throttled {
			throttled = true
			s.metrics.throttled.Add(1)
		}
		s.squeeze()
		if tick == nil {
			tick = time.NewTimer(squeezeEvery)
			defer tick.Stop()
		} else {
			tick.Reset(squeezeEvery)
		}
		select {
		case <-freed:
		case <-tick.C:
		case <-c.stopCh:
			return 0, false
		}
	}
	c.wmu.Lock()
	c.held += cost
	c.wmu.Unlock()
	return cost, true
}

// unreserve gives back the memory of a call that sends no reply.
func (c *conn) unreserve(cost int64) {
	c.wmu.Lock()
	c.held -= cost
	c.drained.Broadcast()
	c.s.mem.release(cost)
	c.wmu.Unlock()
}

// squeeze, at most once every squeezeEvery, sets the write deadline of
// every connection whose write has been stuck to stallAfter after the
// write began: a client that does not read its replies while others wait
// for memory is closed when it is reached.
func (s *Server) squeeze() {
	now := time.Now().UnixNano()
	last := s.mem.lastSqueeze.Load()
	if now-last < int64(squeezeEvery) || !s.mem.lastSqueeze.CompareAndSwap(last, now) {
		return
	}
	s.mu.Lock()
	for c := range s.conns {
		if t := c.writeSince.Load(); t != 0 {
			c.nc.SetWriteDeadline(time.Unix(0, t).Add(s.stallAfter))
		}
	}
	s.mu.Unlock()
}

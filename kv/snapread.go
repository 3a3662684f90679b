package kv

import (
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// readSnaps shares one read-only Badger transaction among the Views that
// start while nothing is written.
//
// Every Badger transaction that is not managed takes a read timestamp and
// marks it begun, and done when discarded, each with a send to the
// watermark goroutine: two wake-ups of another goroutine (and, on an idle
// machine, of another thread) for every View. A READ or a LOOKUP is one
// View, so on a server reading a file or walking a tree those wake-ups
// were a good part of each request's scheduling. A View now takes the
// current shared transaction unless a write has ended since it began:
// every read-write transaction that wrote bumps gen once it has returned
// (committed or not), and a View that finds gen moved opens a new one.
// So a View sees every write that returned before it began, as with a
// transaction of its own; a View that overlaps a write may or may not
// see it, as before.
//
// A write that ends also retires the current transaction, and a
// transaction is discarded once it is no longer current and its last View
// has ended. So an idle store holds no transaction older than its last
// write: it keeps old versions from compaction (and the value-log GC that
// follows it) no longer than a View of its own would have, plus the Views
// that shared it.
type readSnaps struct {
	gen atomic.Uint64 // bumped after every write; read before a transaction opens

	// mu guards cur, closed and the counts of every readSnap. Lock order:
	// a leaf; Badger is called outside it.
	mu     sync.Mutex
	cur    *readSnap
	closed bool // the store is closing: no more sharing
}

// readSnap is one shared read-only transaction.
type readSnap struct {
	t    *badger.Txn
	gen  uint64 // readSnaps.gen when it opened, or earlier
	refs int    // Views using it, plus one while it is current
	uses int    // Views that have used it
}

// maxSnapUses bounds the Views one transaction serves, a backstop against
// a write path that did not bump gen keeping a snapshot current forever.
const maxSnapUses = 1 << 16

// acquire returns a transaction for one View; the caller calls release
// with it once the View ends.
func (r *readSnaps) acquire(db *badger.DB) *readSnap {
	gen := r.gen.Load() // before the transaction opens: it sees at least this
	r.mu.Lock()
	if c := r.cur; c != nil && c.gen == gen && c.uses < maxSnapUses {
		c.refs++
		c.uses++
		r.mu.Unlock()
		return c
	}
	r.mu.Unlock()
	s := &readSnap{t: db.NewTransaction(false), gen: gen, refs: 1, uses: 1}
	var old *readSnap
	r.mu.Lock()
	// Only while gen has not moved: changed bumps gen before it takes mu
	// to retire cur, so a transaction that may predate a write that has
	// returned never becomes current after that write retired the last.
	if !r.closed && r.gen.Load() == gen && (r.cur == nil || r.cur.gen < gen) {
		old = r.cur
		r.cur = s
		s.refs++
	}
	r.mu.Unlock()
	if old != nil {
		r.release(old)
	}
	return s
}

// release ends one View's use of s, discarding it once unused and no
// longer current.
func (r *readSnaps) release(s *readSnap) {
	r.mu.Lock()
	s.refs--
	done := s.refs == 0
	r.mu.Unlock()
	if done {
		s.t.Discard()
	}
}

// changed marks a write as ended: later Views open a new transaction, and
// the current one is let go once its Views end.
func (r *readSnaps) changed() {
	r.gen.Add(1)
	r.mu.Lock()
	old := r.cur
	r.cur = nil
	r.mu.Unlock()
	if old != nil {
		r.release(old)
	}
}

// close stops the sharing (the store is closing) and lets the current
// transaction go once its Views end.
func (r *readSnaps) close() {
	r.mu.Lock()
	old := r.cur
	r.cur = nil
	r.closed = true
	r.mu.Unlock()
	if old != nil {
		r.release(old)
	}
}

package kv

import (
	"context"
	"errors"
)

// Store is an ordered, transactional key-value store. Keys and values are
// byte strings; keys order bytewise. Implementations must be safe for
// concurrent use by multiple goroutines.
type Store interface {
	// View runs fn in a read-only snapshot transaction. The snapshot is
	// consistent: it sees every transaction committed before View started and
	// none committed after fn's first read (a store may fix the snapshot at
	// that read, so a commit in between may or may not be seen).
	View(ctx context.Context, fn func(Txn) error) error
	// Update runs fn in a read-write transaction with optimistic concurrency
	// control. If the transaction conflicts with another committed after it
	// started, Update retries fn from scratch (so fn must be idempotent and
	// must not keep state outside the transaction between attempts). It
	// conflicts when a key it read (with Get, GetFunc or Has, or passed to
	// an Iterate callback) was written or deleted by such a commit; writes
	// alone never conflict (the later commit wins), and a key inserted into
	// a range it iterated may or may not conflict, depending on the store.
	// The transaction commits atomically: after a crash either all or none
	// of its writes are present. An error returned by fn aborts it.
	Update(ctx context.Context, fn func(Txn) error) error
	// NewSnapshot opens a long-lived read-only snapshot. The caller must
	// Discard it.
	NewSnapshot() Snapshot
	// Sync makes every transaction committed before the call durable
	// against power loss. Once a sync has failed, every later one fails
	// with ErrSyncFailed: which transactions reached the disk is unknown.
	Sync(ctx context.Context) error
	// Size reports the bytes the store occupies on disk (approximate).
	Size() (int64, error)
	// Compact runs background space reclamation once (value-log GC and LSM
	// flattening where supported). It is safe to call concurrently with use.
	Compact(ctx context.Context) error
	// ReclaimSpace gives back the disk space of deleted data: it flushes
	// and compacts the store and rewrites its logs until little garbage
	// is left, in steps that keep concurrent transactions going, and
	// reports the disk space before and after. Nothing committed is lost
	// if it is cut short, by an error or a crash.
	ReclaimSpace(ctx context.Context) (ReclaimStats, error)
	// Limits reports how much one read-write transaction may hold. Code
	// that writes in batches (a merge, reclaim) sizes each batch by it.
	Limits() Limits
	// Close flushes and closes the store. After Close every method
	// returns ErrClosed (a Snapshot taken after it, from its reads);
	// closing again returns nil. A store that cannot flush returns
	// ErrCloseTimedOut after a bounded time rather than wait forever.
	Close() error
}

// Limits bounds one Update. An Update within every bound never fails with
// ErrTxnTooBig; one past a bound fails with it (a store whose real bound
// for some shape of transaction is larger, such as Badger's for values
// kept in its value log, may still commit it). Reads in a View are not
// bounded.
type Limits struct {
	// Writes is the most Set and Delete calls one Update may make (a key
	// written twice counts twice).
	Writes int
	// Reads is the most keys one Update that writes may read (Get,
	// GetFunc, Has, each key passed to an Iterate callback) plus the
	// ranges it iterates: etcd checks each of them in the commit.
	Reads int
	// Bytes bounds the size of one Update: the sum, over its Set and
	// Delete calls, of len(key) + len(value) + OpBytes, plus, over its
	// reads, len(key) + OpBytes (a range: both of its bounds, and OpBytes
	// twice).
	Bytes int
	// OpBytes is what each write or read costs beyond its key and value.
	OpBytes int
}

// Batch returns how many items fit in one Update when each costs
// writes writes and bytes bytes (keys, values and OpBytes included), and
// the Update reads nothing: at least 1, so a caller always progresses (an
// item too big alone fails with ErrTxnTooBig).
func (l Limits) Batch(writes, bytes int) int {
	n := l.Writes
	if writes > 0 {
		n = l.Writes / writes
	}
	if bytes > 0 {
		n = min(n, l.Bytes/bytes)
	}
	return max(n, 1)
}

// Snapshot is a read-only transaction that outlives a single callback.
type Snapshot interface {
	Txn
	Discard()
}

// Txn is one transaction. A Txn must not be used after the callback that
// received it returns. Get returns a copy the caller may keep; the slices
// passed to GetFunc's and Iterate's callbacks are only valid during the
// call, so copy them to keep them.
type Txn interface {
	// Get returns the value of key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// GetFunc calls fn with the value of key without copying it; the slice
	// is only valid during fn. ErrNotFound if the key does not exist.
	GetFunc(key []byte, fn func(value []byte) error) error
	// Has reports whether key exists, without reading its value.
	Has(key []byte) (bool, error)
	// Iterate calls fn for every key with the given prefix that is >= start
	// (start nil means the beginning of the prefix), in ascending order, until
	// fn returns false or an error. With keysOnly set, the value passed to fn
	// is nil and values are not read.
	Iterate(prefix, start []byte, keysOnly bool, fn func(key, value []byte) (bool, error)) error
	// Set stores key=value. Only in read-write transactions.
	Set(key, value []byte) error
	// Delete removes key. Only in read-write transactions.
	Delete(key []byte) error
}

// Prefetcher is a Txn of a store reached over the network that reads
// several keys and ranges in one request, ahead of the Get and Iterate
// calls that need them, which it then serves without a request of their
// own. It changes what costs a round trip, never what is read: the reads
// see the transaction's snapshot (fixing it, if Prefetch is its first
// read). A caller checks for it with a type assertion and reads as usual
// when a Txn does not implement it.
type Prefetcher interface {
	// Prefetch reads keys and the first page of an Iterate of each of
	// ranges (at most the range's Limit keys, if it has one), in one
	// request. A later Get, GetFunc or Has of one of keys,
	// or Iterate with a range's prefix and start (and keysOnly false, or
	// keysOnly as the range's), is served from what it read; an Iterate
	// past the first page goes on with ordinary reads.
	Prefetch(keys [][]byte, ranges []IterRange) error
}

// ConcurrentReader is a Txn whose GetFunc may run on several goroutines at
// once, all inside the callback that received the Txn (a READ fetching its
// blocks in parallel). A caller checks for it with a type assertion and
// reads from one goroutine at a time when a Txn does not implement it or
// ConcurrentGets reports false.
type ConcurrentReader interface {
	// ConcurrentGets reports whether GetFunc is safe on several goroutines
	// at once in this transaction.
	ConcurrentGets() bool
}

// IterRange names the keys an Iterate call reads: those with Prefix that
// are >= Start. Limit, if above 0, is how many of them the caller expects
// to read before it stops: a Prefetch reads no more than that many in its
// first page (an Iterate that goes on past them reads on as usual).
type IterRange struct {
	Prefix, Start []byte
	KeysOnly      bool
	Limit         int
}

var (
	// ErrNotFound is returned by Txn.Get when the key does not exist.
	ErrNotFound = errors.New("kv: not found")
	// ErrReadOnly is returned by Set and Delete in a read-only transaction.
	ErrReadOnly = errors.New("kv: read-only transaction")
	// ErrTxnTooBig is returned when a transaction exceeds the store's limits.
	ErrTxnTooBig = errors.New("kv: transaction too big")
	// ErrNoSpace is returned when the disk is full or would eat into the
	// free-space reserve, and by every write of a store opened read-only
	// on a full disk; nothing of the failed transaction is stored.
	ErrNoSpace = errors.New("kv: no space left on device")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("kv: store closed")
	// ErrConflict is returned by Update when retries are exhausted.
	ErrConflict = errors.New("kv: transaction conflict")
	// ErrUnknownOutcome is returned by Update of a store reached over the
	// network when the commit was sent but no answer came back (timeout,
	// cancellation, lost connection): it may or may not have been applied.
	// The caller must read the state again before deciding to retry.
	ErrUnknownOutcome = errors.New("kv: transaction outcome unknown")
	// ErrUnavailable is returned by a store reached over the network when
	// it cannot serve a request for now (no leader, no member answering):
	// nothing was applied, and the same request may succeed later. Stores
	// wrap it in their own errors (etcdkv.ErrUnavailable).
	ErrUnavailable = errors.New("kv: store unavailable")
	// ErrSyncFailed is returned by Sync once an fsync has failed: the
	// store cannot tell any more which transactions are durable, and every
	// later Sync fails until it is opened again.
	ErrSyncFailed = errors.New("kv: sync failed")
	// ErrCloseTimedOut is returned by Close when the store could not
	// finish closing in time: Badger retries a failed memtable flush
	// forever (the store directory is gone, the disk stays full). What
	// Sync acknowledged is durable (in the synced write-ahead and value
	// logs, which the next open replays); the process should exit, since
	// the store's files stay open until it does.
	ErrCloseTimedOut = errors.New("kv: close timed out")
)

package kv

import (
	"path/filepath"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// residency keeps the value log from staying resident in the process.
//
// Badger reads and writes its value logs through shared mappings, and every
// page it touches stays mapped, counted in the server's RSS, until the
// kernel reclaims it: serving a 256 MiB file once leaves 256 MiB of its
// blocks mapped. So every TrimEvery bytes of value-log traffic (values read
// with GetFunc, values written), one value log's mapping is dropped from
// the process's page tables with madvise(MADV_DONTNEED). On a shared file
// mapping that only unmaps the pages: their content stays in the page
// cache (dirty pages stay dirty and are written back as before), and the
// next read maps them again with a minor fault. Only the log holding the
// value at hand can be trimmed (see below), so when the traffic has moved
// on to another log, the previous one is trimmed too, through the last key
// seen in it. Nothing is trimmed while the process's file-backed resident
// memory stays under TrimAbove: then nothing has to be mapped again.
//
// MADV_DONTNEED must never reach memory that is not that mapping (on
// private memory it zeroes the pages), so a trim only runs:
//   - inside Badger's Item.Value callback for a value that Badger read from
//     a value log (its entry is a value pointer): Badger holds that log's
//     read lock until the callback returns, and deleting, closing or
//     sealing (truncating) the log takes the write lock;
//   - on the mapping /proc/self/maps shows at that value's address, read
//     inside the callback, and only if it is a shared mapping of a .vlog
//     file of this store;
//   - under mu's read lock (TryRLock: never waits inside the callback).
//     Badger grows the mapping of the log it writes (mremap, which may move
//     it) without that log's lock, when one write request holds more than
//     ValueLogFileSize of entries; every transaction that large, and
//     value-log GC (whose rewrite requests are not bounded), holds mu's
//     write lock while Badger writes it.
type residency struct {
	dir   string // the store's directory, absolute and with symlinks resolved
	every int64  // bytes of value-log traffic between trims
	above int64  // file-backed resident bytes under which nothing is trimmed
	// big is the transaction size from which a commit holds mu.Lock.
	big uint64

	// mu: read lock while a trim runs; write lock while a request that
	// may grow a value log's mapping is written. Lock order: a Badger
	// value-log file's lock (held by the Item.Value callback) before mu,
	// taken only with TryRLock there.
	mu       sync.RWMutex
	pending  atomic.Int64 // bytes since the last trim
	trimming atomic.Bool  // one trim at a time
	over     atomic.Bool  // file-backed RSS was over above when last read
	trims    atomic.Int64 // trims done (tests)

	// Set by the trim holding trimming: the mapping trimmed last and a
	// key whose value lies in it.
	lastLo  uintptr
	lastKey []byte
}

// newResidency returns nil when trimming is off (every < 0, in memory, or
// an unsupported OS).
func newResidency(dir string, every, above, fileSize int64) *residency {
	if every < 0 || !trimSupported {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil
	}
	r := &residency{dir: abs, every: every, above: above, big: uint64(fileSize / 2)}
	r.over.Store(above <= 0)
	return r
}

// add counts n bytes of traffic and reports whether a trim is due.
func (r *residency) add(n int) bool {
	if r == nil || r.pending.Add(int64(n)) < r.every {
		return false
	}
	if r.above > 0 && fileResident() < r.above {
		r.over.Store(false)
		r.pending.Store(0)
		return false
	}
	r.over.Store(true)
	return true
}

// note counts n bytes of value-log traffic that did not go through the
// mappings (vlogFiles): it trims nothing, but every TrimEvery bytes it
// looks at the resident memory again, for trimsOn to say whether reads
// should keep away from the mappings.
func (r *residency) note(n int) {
	if r == nil || r.pending.Add(int64(n)) < r.every {
		return
	}
	r.pending.Store(0)
	r.over.Store(r.above <= 0 || fileResident() >= r.above)
}

// trimsOn reports whether the value logs' mappings are being trimmed:
// the process's file-backed resident memory was over TrimAbove when last
// looked at. Then a value read through a mapping faults its pages in
// again, and vlogFiles reads a single value with a pread instead;
// otherwise the pages a read maps stay mapped, and copying one value out
// of them costs less than a pread (a system call and the kernel's slower
// copy).
func (r *residency) trimsOn() bool { return r == nil || r.over.Load() }

// fromValueLog reports whether Badger reads item's value from a value log
// (the entry holds a value pointer) rather than from the LSM tree: for a
// value pointer, EstimatedSize is the whole log entry (header, key with
// its timestamp, value, checksum), for an inline value the key and value.
func fromValueLog(item *badger.Item) bool {
	return item.EstimatedSize()-item.ValueSize() > item.KeySize()
}

// trim drops the mapping of the value log holding v, the value of key,
// which must be a value Badger returned from a value log to an Item.Value
// callback that is still running (see residency). When the log trimmed
// before was another one, it returns a key whose value lies there: the
// caller trims it with trimOnly once this callback has returned.
func (r *residency) trim(v, key []byte) (prev []byte) {
	if len(v) == 0 || !r.trimming.CompareAndSwap(false, true) {
		return nil
	}
	defer r.trimming.Store(false)
	if !r.mu.TryRLock() {
		return nil
	}
	defer r.mu.RUnlock()
	r.pending.Store(0)
	lo, ok := trimMapping(r.dir, v)
	if !ok {
		return nil
	}
	r.trims.Add(1)
	if lo != r.lastLo {
		prev = r.lastKey
	}
	r.lastLo, r.lastKey = lo, append([]byte(nil), key...)
	return prev
}

// trimOnly is trim without following: for the previous log.
func (r *residency) trimOnly(v []byte) {
	if len(v) == 0 || !r.trimming.CompareAndSwap(false, true) {
		return
	}
	defer r.trimming.Store(false)
	if !r.mu.TryRLock() {
		return
	}
	defer r.mu.RUnlock()
	if _, ok := trimMapping(r.dir, v); ok {
		r.trims.Add(1)
	}
}

// trimKey trims the log holding key's value in txn, if it is in a log.
func (r *residency) trimKey(txn *badger.Txn, key []byte) {
	it, err := txn.Get(key)
	if err != nil || !fromValueLog(it) {
		return // gone since, or rewritten small: nothing to do
	}
	it.Value(func(v []byte) error {
		r.trimOnly(v)
		return nil
	})
}

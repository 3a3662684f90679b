package kv

import (
	"fmt"
	"sync"
	"syscall"
	"time"
)

// DefaultReserve is the free space a store keeps on its disk unless
// BadgerOptions.Reserve says otherwise.
const DefaultReserve = 512 << 20

// MinReserve is the smallest reserve a store with opts accepts: half of
// the reserve (what small transactions and deletes may not use) must hold
// the memtables that may be waiting for their flush when writes stop, and
// the room a value-log rewrite of ReclaimSpace needs on a full disk (see
// rewriteRatio). Unset memtables count as sized for a small reserve
// (8 MiB each, as below a 64 MiB reserve): 32 MiB with the defaults.
func MinReserve(opts BadgerOptions) int64 {
	if opts.MemTableSize <= 0 {
		opts.MemTableSize = 8 << 20
	}
	opts.EnsureDefaults()
	mem := int64(opts.NumMemtables) * opts.MemTableSize
	gc := rewriteSlack + int64(1.25*(1-maxRewriteRatio)*float64(opts.ValueLogFileSize))
	return 2 * max(mem, gc)
}

// smallTxn: transactions that write at most this many bytes (deletes,
// renames, branch aborts, new empty files) may still use the lower half of
// the reserve, so that a user can free space through the store itself.
const smallTxn = 16 << 10

// Space describes the filesystem holding a store, as far as the store may
// use it: the reserve is not counted as free.
type Space struct {
	TotalBytes uint64 // size of the filesystem
	FreeBytes  uint64 // free bytes beyond the reserve
	AvailBytes uint64 // free bytes beyond the reserve for an unprivileged user
	TotalFiles uint64
	FreeFiles  uint64
	Reserve    uint64 // the reserve kept free
	ReadOnly   bool   // opened read-only because the disk was full
	// Quota is set when the figures are a server's quota rather than a
	// filesystem: etcd's --quota-backend-bytes as TotalBytes, its database
	// size subtracted for FreeBytes and AvailBytes, and the same two as
	// TotalFiles and FreeFiles (a file takes at least one byte of it, so
	// no more files than that fit).
	Quota bool
}

// SpaceReporter is implemented by stores that live on a local filesystem,
// or within a server's quota (Space.Quota).
type SpaceReporter interface {
	// Space reports the store's filesystem, minus the reserve.
	Space() (Space, error)
}

// statfsResult is what the reserve needs from statfs(2).
type statfsResult struct {
	total, free, avail, files, ffree uint64
}

func statfsDir(dir string) (statfsResult, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return statfsResult{}, err
	}
	bs := uint64(s.Bsize)
	return statfsResult{
		total: uint64(s.Blocks) * bs, free: uint64(s.Bfree) * bs, avail: uint64(s.Bavail) * bs,
		files: uint64(s.Files), ffree: uint64(s.Ffree),
	}, nil
}

// reserve refuses writes before the disk under the store fills up.
//
// Badger writes its logs, tables and value logs through shared mmaps: when
// the filesystem cannot back a page that is written for the first time,
// the kernel kills the process with SIGBUS, and no error code is ever
// returned. So the store must stop admitting writes while the disk still
// has room for everything that is already under way: the memtables waiting
// for their flush, the compaction that follows, and the transactions
// committed since the last look at the disk. The reserve is that room.
// Below it, only small transactions (aborts, renames) and those that only
// delete pass, and only while more than half of it is left; below half,
// every write is refused. Reads never check.
type reserve struct {
	dir    string                                 // read only
	size   uint64                                 // read only; 0 disables the check
	statfs func(dir string) (statfsResult, error) // read only

	mu       sync.Mutex // protects the following
	last     statfsResult
	lastErr  error
	at       time.Time
	written  uint64 // bytes admitted since the last statfs
	inflight uint64 // bytes admitted and not yet committed
}

// refreshEvery bounds how stale the cached free space may get.
const refreshEvery = time.Second

func (r *reserve) stat() (statfsResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statLocked(true)
}

// statLocked returns the free space, calling statfs when forced, when the
// cache is old, when much was written since, or when the disk is close to
// the reserve (then every write looks, so that writes resume as soon as
// space returns).
func (r *reserve) statLocked(force bool) (statfsResult, error) {
	if force || r.at.IsZero() || time.Since(r.at) > refreshEvery ||
		r.written > r.size/8 || r.last.avail < 2*r.size+r.written {
		r.last, r.lastErr = r.statfs(r.dir)
		r.at, r.written = time.Now(), 0
	}
	return r.last, r.lastErr
}

// admit returns nil if a transaction writing n bytes may commit, else an
// ErrNoSpace error that says what to do.
func (r *reserve) admit(n uint64, deletesOnly bool) error {
	if r.size == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.statLocked(false)
	if err != nil {
		// Without statfs nothing can be promised; let Badger try.
		return nil
	}
	// The logs take a transaction's bytes about twice (write-ahead log,
	// then a table when its memtable is flushed). Transactions admitted
	// but not yet written count as used: statfs cannot see them yet, and
	// concurrent writers must not all pass on the same figure.
	avail := st.avail - min(st.avail, r.inflight)
	need := r.size
	if n <= smallTxn || deletesOnly {
		// Deletes free space (the reclaimer's batches, an abort): they
		// may use the lower half of the reserve whatever their size.
		need = r.size / 2
	}
	if avail < need || avail-need < 2*n {
		return r.errLocked(avail)
	}
	r.written += 2 * n
	r.inflight += 2 * n
	return nil
}

// release ends the admission of a transaction of n bytes: it is written
// (or failed), and statfs sees what it took.
func (r *reserve) release(n uint64) {
	if r.size == 0 {
		return
	}
	r.mu.Lock()
	r.inflight -= min(r.inflight, 2*n)
	r.mu.Unlock()
}

func (r *reserve) errLocked(avail uint64) error {
	return noSpacef("the filesystem of %s has %s free, and the store keeps %s free so that it never fills the disk; free space on that filesystem and retry (writes resume by themselves; reads keep working)",
		r.dir, FormatBytes(avail), FormatBytes(r.size))
}

// noSpaceError is ErrNoSpace with what to do about it. It is also
// syscall.ENOSPC, so callers that map errnos (exit codes, NFS) see it.
type noSpaceError struct{ msg string }

func noSpacef(format string, a ...any) error { return &noSpaceError{fmt.Sprintf(format, a...)} }

func (e *noSpaceError) Error() string { return ErrNoSpace.Error() + ": " + e.msg }

func (e *noSpaceError) Is(target error) bool {
	return target == ErrNoSpace || target == syscall.ENOSPC
}

// FormatBytes formats n in binary units, e.g. "512 MiB".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	if v == float64(uint64(v)) {
		return fmt.Sprintf("%d %ciB", uint64(v), "KMGTP"[exp])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[exp])
}

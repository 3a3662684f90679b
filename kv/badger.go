package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// BadgerOptions tunes the Badger store. The zero value means defaults tuned
// for a laptop.
type BadgerOptions struct {
	// InMemory keeps everything in memory (tests). Dir is ignored.
	InMemory bool
	// ValueThreshold: values at least this large live in the value log.
	// Default 8 KiB: full data blocks (32 KiB) go there, so they do not
	// bloat the LSM tree and a transaction of many blocks stays far from
	// Badger's size limit; a small file's content stays in the
	// write-ahead log and the tree, so a FILE_SYNC of it fsyncs one log,
	// not two (logFiles skips a value log nothing was written to).
	ValueThreshold int64
	// MemTableSize and NumMemtables bound write buffering (2 memtables of
	// an eighth of the reserve, between 8 and 16 MiB: 16 MiB with the
	// default reserve). The reserve must cover the memtables waiting for
	// their flush and the compaction after it. Each memtable is a Go heap
	// arena of about 1.3 times its size that becomes resident as it fills,
	// so larger memtables make the server's memory grow for longer; data
	// blocks go to the value log, so memtables hold metadata only and
	// 16 MiB of it is thousands of transactions.
	MemTableSize int64
	NumMemtables int
	// BlockCacheSize and IndexCacheSize (32 MiB each).
	BlockCacheSize int64
	IndexCacheSize int64
	// SyncWrites makes every commit durable against power loss (slow).
	SyncWrites bool
	// Reserve is the free space kept on the store's filesystem (default
	// DefaultReserve, at least MinReserve; negative disables the check). Writes that would eat
	// into it fail with ErrNoSpace, because Badger writes through mmaps and
	// a full disk would kill the process with SIGBUS. A store opened with
	// less than half the reserve free opens read-only. See reserve.
	Reserve int64
	// GCInterval is how often value-log GC runs in the background (5 min);
	// negative disables it.
	GCInterval time.Duration
	// Logger receives Badger's warnings and errors (default slog.Default()).
	Logger *slog.Logger
	// ValueLogFileSize is the size at which Badger starts a new value log
	// (default 32 MiB, at least 1 MiB). Value-log GC frees whole files and
	// never the one being written, so smaller files give space back in
	// smaller steps; each is one open file and mapping.
	ValueLogFileSize int64
	// TrimEvery is how many bytes of value-log traffic (values read and
	// written) pass between two trims of the value log's mappings from
	// the process (default 16 MiB; negative: never), and TrimAbove the
	// file-backed resident memory of the process under which nothing is
	// trimmed (default 64 MiB; negative: trim regardless). See residency.
	TrimEvery int64
	TrimAbove int64
	// CloseTimeout bounds Close (default 20s): past it, Close returns
	// ErrCloseTimedOut and leaves Badger retrying its flush in the
	// background until the process exits.
	CloseTimeout time.Duration
}

// EnsureDefaults fills zero fields with defaults.
func (o *BadgerOptions) EnsureDefaults() {
	if o.ValueThreshold <= 0 {
		o.ValueThreshold = 8 << 10
	}
	if o.Reserve == 0 {
		o.Reserve = DefaultReserve
	}
	if o.MemTableSize <= 0 {
		o.MemTableSize = min(max(o.Reserve/8, 8<<20), 16<<20)
	}
	if o.NumMemtables <= 0 {
		o.NumMemtables = 2
	}
	if o.BlockCacheSize <= 0 {
		o.BlockCacheSize = 32 << 20
	}
	if o.IndexCacheSize <= 0 {
		o.IndexCacheSize = 32 << 20
	}
	if o.GCInterval == 0 {
		o.GCInterval = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ValueLogFileSize <= 0 {
		o.ValueLogFileSize = 32 << 20
	}
	o.ValueLogFileSize = min(max(o.ValueLogFileSize, 1<<20), 1<<30)
	if o.TrimEvery == 0 {
		o.TrimEvery = 16 << 20
	}
	if o.TrimAbove == 0 {
		o.TrimAbove = 64 << 20
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 20 * time.Second
	}
}

// badgerStore implements Store on Badger v4.
type badgerStore struct {
	db     *badger.DB
	dir    string        // read only
	opts   BadgerOptions // read only
	cancel context.CancelFunc
	wg     sync.WaitGroup

	syncer *groupSync // Sync's group commit
	// writes counts the read-write transactions that wrote (committed or
	// not) since the store was opened, plus one so that the first Sync
	// always syncs (what an earlier process wrote may not be on disk);
	// synced is the highest count read before a Sync that then
	// succeeded. A Sync that finds them equal has nothing to make
	// durable.
	writes, synced atomic.Uint64
	// vlogWrites counts the transactions that set a value going to the
	// value log, and the value-log GC rounds, each counted once Badger
	// has written it (logFiles skips the fsync of a value log nothing was
	// written to since its last one).
	vlogWrites atomic.Uint64
	rsd        *residency // trims the value log's mappings; nil: off
	vf         *vlogFiles // reads values with pread; nil in memory
	logs       *logFiles  // nil in memory
	res        reserve    // free-space reserve; size 0 in memory
	// roErr is set when the store was opened read-only because its disk
	// was full: every write fails with it.
	roErr error // read only
	// maxValue bounds the values of an in-memory store, which has no
	// value log: Badger would crash writing a value of its value threshold
	// or more. 0 means no bound.
	maxValue int // read only

	// closeMu guards closed. Calls Badger does not guard itself (Sync,
	// Size, Compact, NewSnapshot) hold the read lock while they use the
	// database, so Close waits for them and later calls get ErrClosed
	// instead of touching a closed database. Lock order: closeMu before
	// the syncer's and logs' mutexes.
	closeMu sync.RWMutex
	closed  bool
	// updates counts the Updates under way (Added under closeMu's read
	// lock while closed is false). Close waits for them before it closes
	// Badger: a commit that passed Badger's own check for a closed
	// database could still be sending on the write channel that Badger's
	// Close closes (a data race, and a panic if the send comes second).
	// They are not held under closeMu, since their fn may call the store
	// again.
	updates sync.WaitGroup

	gcMu sync.Mutex // one ReclaimSpace at a time

	// commitMu keeps commits and value-log GC rounds apart: commits hold
	// the read lock, a GC round the write lock. Badger (since 4.9.3, where
	// a rewrite pins its discard timestamp to DB.MaxVersion) reads the
	// memtable's maxVersion under its own lock, while its write goroutine
	// sets it without one: a data race inside Badger whenever a commit
	// runs during a rewrite, which no released version fixes. So no
	// commit runs during a round; writers wait at most one round (one
	// value log's live values moved: 50 to 100 ms for a 32 MiB log with a
	// fifth of it live, here). Lock order: rsd.mu before commitMu.
	commitMu sync.RWMutex

	snaps readSnaps // the read-only transaction Views share
}

func (s *badgerStore) isClosed() bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	return s.closed
}

// use runs fn unless the store is closed; Close waits for it.
func (s *badgerStore) use(fn func() error) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return fn()
}

var _ Store = (*badgerStore)(nil)

// OpenBadger opens (creating if needed) a Badger store in dir. Only one
// process may open a directory at a time.
//
// On a filesystem with less than half the reserve free, the store opens
// read-only (Badger would write its new logs at once) and every write fails
// with ErrNoSpace until it is opened again with space.
func OpenBadger(dir string, opts BadgerOptions) (Store, error) {
	return openBadger(dir, opts, statfsDir)
}

// removeEmptyLogs removes the empty write-ahead logs (*.mem) and value
// logs (*.vlog) in dir. A process killed between creating such a file and
// sizing it leaves one of zero bytes, and Badger refuses to open a
// directory that holds one ("Create a new file"): the store would not open
// again after such a crash. An empty log holds no entries, and no value
// pointer can name it.
func removeEmptyLogs(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".mem") && !strings.HasSuffix(e.Name(), ".vlog") {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func openBadger(dir string, opts BadgerOptions, statfs func(string) (statfsResult, error)) (Store, error) {
	opts.EnsureDefaults()
	bo := badger.DefaultOptions(dir)
	if opts.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	}
	s := &badgerStore{opts: opts, dir: dir}
	if floor := MinReserve(opts); !opts.InMemory && opts.Reserve > 0 && opts.Reserve < floor {
		return nil, fmt.Errorf("kv: open %s: a reserve of %s is too small: a store keeps at least %s free (half of it holds the %d memory tables of %s that may wait for their flush when writes stop, and what gc needs to give space back on a full disk); use a reserve of at least %s, or 0 to turn the check off",
			dir, FormatBytes(uint64(opts.Reserve)), FormatBytes(uint64(floor)), opts.NumMemtables, FormatBytes(uint64(opts.MemTableSize)), FormatBytes(uint64(floor)))
	}
	if !opts.InMemory && opts.Reserve > 0 {
		s.res = reserve{dir: dir, size: uint64(opts.Reserve), statfs: statfs}
		_, statErr := os.Stat(dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("kv: open %s: %w", dir, mapErr(err))
		}
		st, err := s.res.stat()
		if err == nil && st.avail < s.res.size/2 && !hasStore(dir) {
			if statErr != nil {
				os.Remove(dir)
			}
			return nil, noSpacef("cannot create a store in %s: its filesystem has %s free, and a store keeps %s free so that it never fills the disk; free space there or choose another directory",
				dir, FormatBytes(st.avail), FormatBytes(s.res.size))
		}
		if err == nil && st.avail < s.res.size/2 {
			s.roErr = noSpacef("the store was opened read-only because the filesystem of %s had only %s free (the store keeps %s free so that it never fills the disk); free space on that filesystem and restart the server to write again",
				dir, FormatBytes(st.avail), FormatBytes(s.res.size))
			bo = bo.WithReadOnly(true)
			opts.Logger.Warn("kv: disk full: store opened read-only", "dir", dir,
				"free", FormatBytes(st.avail), "reserve", FormatBytes(s.res.size))
		}
	}
	if !opts.InMemory {
		if err := removeEmptyLogs(dir); err != nil {
			return nil, fmt.Errorf("kv: open %s: %w", dir, mapErr(err))
		}
		bo = bo.WithValueThreshold(opts.ValueThreshold)
	} else {
		// In-memory stores have no value log: every value stays in the LSM,
		// and Badger wants the threshold under its batch size (15% of a
		// memtable).
		bo = bo.WithValueThreshold(min(1<<20, opts.MemTableSize/10))
		s.maxValue = int(min(1<<20, opts.MemTableSize/10))
	}
	bo = bo.WithMemTableSize(opts.MemTableSize).
		WithNumMemtables(opts.NumMemtables).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(opts.BlockCacheSize).
		WithIndexCacheSize(opts.IndexCacheSize).
		WithSyncWrites(opts.SyncWrites).
		WithNumCompactors(2).
		WithValueLogFileSize(opts.ValueLogFileSize).
		WithLogger(badgerLogger{opts.Logger}).
		WithNumVersionsToKeep(1).
		WithDetectConflicts(true)
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", dir, mapErr(err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.db, s.cancel = db, cancel
	s.syncer = newGroupSync(s.syncAll)
	s.writes.Store(1)
	if !opts.InMemory && s.roErr == nil {
		s.logs = newLogFiles(dir)
		s.logs.vlogWrites = s.vlogWrites.Load
	}
	if !opts.InMemory {
		s.rsd = newResidency(dir, opts.TrimEvery, opts.TrimAbove, opts.ValueLogFileSize)
		s.vf = &vlogFiles{dir: dir, log: opts.Logger}
	}
	if opts.GCInterval > 0 && !opts.InMemory && s.roErr == nil {
		s.wg.Add(1)
		go s.gcLoop(ctx)
	}
	return s, nil
}

func (s *badgerStore) gcLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.vf.closeAll() // logs deleted once a reader's iterator closed
			for s.runValueLogGC(0.5) == nil {
				if ctx.Err() != nil {
					return
				}
			}
		}
	}
}

func (s *badgerStore) View(ctx context.Context, fn func(Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.db.IsClosed() {
		return mapErr(badger.ErrDBClosed)
	}
	rs := s.snaps.acquire(s.db)
	defer s.snaps.release(rs)
	return mapErr(fn(&badgerTxn{t: rs.t, rsd: s.rsd, vf: s.vf}))
}

// hasStore reports whether dir already holds a Badger store.
func hasStore(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, badger.ManifestFilename))
	return err == nil
}

// runValueLogGC runs one round of value-log GC so that a power loss cannot
// lose what it moves. Badger rewrites the live entries of a value log into
// the current logs and then deletes the old file, without an fsync in
// between; but it defers the deletion while an iterator is open. So an
// iterator stays open until the moved entries are synced.
func (s *badgerStore) runValueLogGC(discardRatio float64) error {
	txn := s.db.NewTransaction(false)
	it := txn.NewIterator(badger.IteratorOptions{})
	// The rewrite's requests are not bounded: no trim while they run.
	if s.rsd != nil {
		s.rsd.mu.Lock()
	}
	s.commitMu.Lock()
	err := s.db.RunValueLogGC(discardRatio)
	s.commitMu.Unlock()
	s.vlogWrites.Add(1) // it may have moved entries into the current log
	if s.rsd != nil {
		s.rsd.mu.Unlock()
	}
	if err == nil {
		err = s.syncer.sync()
	}
	it.Close()
	txn.Discard()
	s.vf.closeAll() // the logs it deleted
	return err
}

func (s *badgerStore) Update(ctx context.Context, fn func(Txn) error) error {
	if s.roErr != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A read-only store still runs transactions that only read.
		return mapErr(s.db.View(func(t *badger.Txn) error { return fn(&badgerTxn{t: t, rw: true, roErr: s.roErr}) }))
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	s.updates.Add(1)
	s.closeMu.RUnlock()
	defer s.updates.Done()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var admitted uint64
		var tx *badgerTxn
		err := s.update(func(t *badger.Txn) error {
			tx = &badgerTxn{t: t, rw: true, maxValue: s.maxValue, rsd: s.rsd, vf: s.vf, threshold: int(s.opts.ValueThreshold)}
			if err := fn(tx); err != nil {
				return err
			}
			if tx.writes == 0 {
				return nil
			}
			if err := s.res.admit(tx.bytes, tx.sets == 0); err != nil {
				return err
			}
			admitted = tx.bytes
			return nil
		})
		if tx != nil && tx.writes > 0 {
			if tx.vlogBytes > 0 {
				s.vlogWrites.Add(1) // before the write counts for Sync
			}
			s.writes.Add(1)
			s.snaps.changed()
		}
		if admitted > 0 {
			s.res.release(admitted)
		}
		if tx != nil && tx.bigLocked {
			s.rsd.mu.Unlock()
		}
		if err == nil && tx != nil && len(tx.fixed) > 0 {
			s.locateFixed(tx.fixed)
		}
		if err == nil && tx != nil && tx.lastBig != nil && s.rsd.add(tx.vlogBytes) {
			s.trimAfterWrite(tx.lastBig)
		}
		if errors.Is(err, badger.ErrBlockedWrites) && !s.isClosed() {
			// ReclaimSpace is flushing the memtables: wait for it.
			attempt--
			time.Sleep(time.Millisecond)
			continue
		}
		if !errors.Is(err, badger.ErrConflict) {
			return mapErr(err)
		}
		if attempt >= 200 {
			return ErrConflict
		}
		// Back off a little so contending writers interleave.
		time.Sleep(time.Duration(rand.IntN(50*(attempt+1))) * time.Microsecond)
	}
}

// update is Badger's DB.Update with the commit under commitMu's read
// lock (fn runs outside it: it may call the store again).
func (s *badgerStore) update(fn func(*badger.Txn) error) error {
	if s.db.IsClosed() {
		return badger.ErrDBClosed
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	if err := fn(txn); err != nil {
		return err
	}
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	return txn.Commit()
}

func (s *badgerStore) NewSnapshot() Snapshot {
	var snap Snapshot
	if s.use(func() error { snap = &badgerTxn{t: s.db.NewTransaction(false)}; return nil }) != nil {
		return closedSnapshot{}
	}
	return snap
}

// closedSnapshot is the snapshot of a closed store: every read fails.
type closedSnapshot struct{}

func (closedSnapshot) Get([]byte) ([]byte, error)               { return nil, ErrClosed }
func (closedSnapshot) GetFunc([]byte, func([]byte) error) error { return ErrClosed }
func (closedSnapshot) Has([]byte) (bool, error)                 { return false, ErrClosed }
func (closedSnapshot) Iterate([]byte, []byte, bool, func(k, v []byte) (bool, error)) error {
	return ErrClosed
}
func (closedSnapshot) Set([]byte, []byte) error { return ErrReadOnly }
func (closedSnapshot) Delete([]byte) error      { return ErrReadOnly }
func (closedSnapshot) Discard()                 {}

// locateFixed remembers where the values of keys, set with SetFixed by a
// transaction that just committed, lie in the value logs: the read that
// follows a write then finds every block without a lookup of its own.
// This moves one lookup per block from the first read to the write (the
// write still ran at the same speed; see docs/benchmarks.md). A key
// deleted or rewritten since is located wherever its visible value lies
// now, or not at all.
func (s *badgerStore) locateFixed(keys [][]byte) {
	s.use(func() error {
		return s.db.View(func(t *badger.Txn) error {
			for _, k := range keys {
				if it, err := t.Get(k); err == nil {
					if e, ok := locate(it); ok {
						s.vf.locs.put(k, e)
					}
				}
			}
			return nil
		})
	})
}

// trimAfterWrite trims the mapping of the value log that holds key's value,
// just written: the log Badger writes to.
func (s *badgerStore) trimAfterWrite(key []byte) {
	s.use(func() error {
		return s.db.View(func(t *badger.Txn) error {
			it, err := t.Get(key)
			if err != nil || !fromValueLog(it) {
				return nil // deleted or rewritten since: nothing to do
			}
			var prev []byte
			it.Value(func(v []byte) error {
				prev = s.rsd.trim(v, key)
				return nil
			})
			if prev != nil {
				s.rsd.trimKey(t, prev)
			}
			return nil
		})
	})
}

// Sync makes every transaction committed before the call durable. Callers
// that arrive while an fsync runs wait for the next one, which serves them
// all (group commit), so N concurrent COMMITs cost about two fsyncs. See
// groupSync for the error rules and logFiles for what is synced. A Sync
// when no transaction wrote since the last one that succeeded fsyncs
// nothing (it still fails if an fsync ever failed): a COMMIT of a file
// already made durable costs no fsync.
func (s *badgerStore) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.use(func() error {
		w := s.writes.Load() // every write counted here committed before the fsync below starts
		if s.synced.Load() >= w {
			return mapErr(s.syncer.err())
		}
		if err := s.syncer.sync(); err != nil {
			return mapErr(err)
		}
		for {
			cur := s.synced.Load()
			if cur >= w || s.synced.CompareAndSwap(cur, w) {
				return nil
			}
		}
	})
}

// syncAll is one fsync of everything a committed transaction may sit in.
func (s *badgerStore) syncAll() error {
	if s.logs == nil {
		return s.db.Sync() // in memory or read-only: nothing to sync
	}
	if err := syncMapped(s.db); err != nil {
		return err
	}
	return s.logs.sync()
}

// Space reports the store's filesystem minus the reserve.
func (s *badgerStore) Space() (Space, error) {
	if s.opts.InMemory {
		return Space{}, fmt.Errorf("kv: an in-memory store has no filesystem")
	}
	var st statfsResult
	var err error
	if s.res.statfs != nil {
		st, err = s.res.stat()
	} else {
		st, err = statfsDir(s.dir)
	}
	if err != nil {
		return Space{}, err
	}
	r := s.res.size
	sub := func(n uint64) uint64 {
		if n < r {
			return 0
		}
		return n - r
	}
	return Space{
		TotalBytes: st.total, FreeBytes: sub(st.free), AvailBytes: sub(st.avail),
		TotalFiles: st.files, FreeFiles: st.ffree, Reserve: r, ReadOnly: s.roErr != nil,
	}, nil
}

func (s *badgerStore) Size() (int64, error) {
	var n int64
	err := s.use(func() error {
		lsm, vlog := s.db.Size()
		n = lsm + vlog
		return nil
	})
	return n, err
}

func (s *badgerStore) Compact(ctx context.Context) error {
	if err := s.use(func() error { return nil }); err != nil || s.opts.InMemory || s.roErr != nil {
		return err
	}
	if err := s.use(func() error { return mapErr(s.db.Flatten(2)) }); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.use(func() error { return s.runValueLogGC(0.01) })
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return nil
		}
		if err != nil {
			return mapErr(err)
		}
	}
}

// Close closes the store; later calls fail with ErrClosed, and closing
// again does nothing.
func (s *badgerStore) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.snaps.close()
	s.cancel()
	// Badger's Close flushes the memtables and retries a failed flush
	// every second, forever: with the store directory gone or the disk
	// full it never returns, and a server asked to stop would never exit.
	// So Close waits for it at most CloseTimeout. Nothing acknowledged is
	// lost then: a Sync made it durable in the write-ahead and value logs
	// (the flush only moves it into tables), and the next open replays
	// those logs.
	done := make(chan error, 1)
	go func() {
		s.wg.Wait()      // a GC round may wait for the flush too
		s.updates.Wait() // see updates
		done <- mapErr(s.db.Close())
	}()
	timer := time.NewTimer(s.opts.CloseTimeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-done:
	case <-timer.C:
		err = fmt.Errorf("%w: %s could not flush its memory tables within %v (is the disk full, or the directory gone?); what was synced is durable and the next open replays the rest of the logs",
			ErrCloseTimedOut, s.dir, s.opts.CloseTimeout)
		return err
	}
	s.vf.closeAll()
	if s.logs != nil {
		s.logs.close()
	}
	return err
}

// mapErr turns Badger errors into kv errors, keeping the original wrapped.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, badger.ErrKeyNotFound):
		return ErrNotFound
	case errors.Is(err, badger.ErrTxnTooBig):
		return fmt.Errorf("%w: %v", ErrTxnTooBig, err)
	case errors.Is(err, badger.ErrDBClosed):
		return ErrClosed
	case errors.Is(err, ErrNoSpace):
		return err // the reserve's own error
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	return err
}

type badgerTxn struct {
	t   *badger.Txn
	rw  bool
	rsd *residency // nil: no trims
	vf  *vlogFiles // nil: values through Item.Value only
	// threshold: values this large go to the value log (0: unknown).
	threshold int
	// bigLocked: the transaction grew past rsd.big and holds rsd.mu.Lock
	// until its commit returns.
	bigLocked bool
	lastBig   []byte // key of the last value set that goes to the value log
	// fixed: keys set with SetFixed whose values go to the value log;
	// Update locates them once the transaction committed.
	fixed     [][]byte
	vlogBytes int   // bytes of values set that go to the value log
	roErr     error // set in a read-only store: writes fail with it
	// maxValue: values must be smaller (0: no bound); see badgerStore.
	maxValue int

	writes int    // Set and Delete calls
	sets   int    // Set calls
	bytes  uint64 // bytes of keys and values written
}

func (t *badgerTxn) Get(key []byte) ([]byte, error) {
	it, err := t.t.Get(key)
	if err != nil {
		return nil, mapErr(err)
	}
	v, err := it.ValueCopy(nil)
	return v, mapErr(err)
}

func (t *badgerTxn) GetFunc(key []byte, fn func([]byte) error) error {
	it, err := t.t.Get(key)
	if err != nil {
		return mapErr(err)
	}
	return t.itemValue(key, it, fn)
}

// itemValue is GetFunc of the item it, found under key.
func (t *badgerTxn) itemValue(key []byte, it *badger.Item, fn func([]byte) error) error {
	if t.rsd == nil || t.rw || !fromValueLog(it) {
		return mapErr(it.Value(fn))
	}
	var prev []byte
	err := it.Value(func(v []byte) error {
		err := fn(v)
		if t.rsd.add(len(v)) {
			prev = t.rsd.trim(v, key) // still inside the callback: the log is locked
		}
		return err
	})
	if prev != nil {
		t.rsd.trimKey(t.t, prev)
	}
	return mapErr(err)
}

// ConcurrentGets: a read-only Badger transaction only reads its fixed
// read timestamp and the database, each Get makes an Item of its own, and
// value logs are read under read locks; the residency trims take their
// own locks (trim, trimKey). A read-write one tracks its reads in a map.
func (t *badgerTxn) ConcurrentGets() bool { return !t.rw }

var _ ConcurrentReader = (*badgerTxn)(nil)

func (t *badgerTxn) Has(key []byte) (bool, error) {
	_, err := t.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, mapErr(err)
}

// HasFixed is Has that remembers where the value lies (FixedWriter): the
// lookup found it, so the location costs nothing more.
func (t *badgerTxn) HasFixed(key []byte) (bool, error) {
	it, err := t.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, mapErr(err)
	}
	// A value this transaction set is not in a log yet: locate says so.
	if e, ok := locate(it); ok && t.vf != nil {
		t.vf.locs.put(key, e)
	}
	return true, nil
}

// SetFixed is Set of a key whose value Update locates once the
// transaction committed (FixedWriter).
func (t *badgerTxn) SetFixed(key, value []byte) error {
	k, err := t.set(key, value)
	if err == nil && t.vf != nil && t.threshold > 0 && len(value) >= t.threshold {
		t.fixed = append(t.fixed, k)
	}
	return err
}

func (t *badgerTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	io := badger.DefaultIteratorOptions
	io.Prefix = prefix
	// No background prefetching: the values iterated here are small
	// (records and block references) and sit in the LSM tree, so fetching
	// them in line is cheaper than Badger's prefetch goroutines.
	io.PrefetchValues = false
	it := t.t.NewIterator(io)
	defer it.Close()
	seek := prefix
	if bytes.Compare(start, prefix) > 0 {
		seek = start // a start before the prefix would end at once
	}
	for it.Seek(seek); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		var v []byte
		if !keysOnly {
			var err error
			if v, err = item.ValueCopy(nil); err != nil {
				return mapErr(err)
			}
		}
		more, err := fn(item.Key(), v)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	return nil
}

func (t *badgerTxn) Set(key, value []byte) error {
	_, err := t.set(key, value)
	return err
}

// set is Set; it returns the transaction's copy of key.
func (t *badgerTxn) set(key, value []byte) ([]byte, error) {
	if !t.rw {
		return nil, ErrReadOnly
	}
	if t.roErr != nil {
		return nil, t.roErr
	}
	if t.maxValue > 0 && len(value) >= t.maxValue {
		return nil, fmt.Errorf("%w: a value of %d bytes does not fit an in-memory store, which keeps values under %d bytes (a tenth of its memtable, at most 1 MiB): write smaller values or use a store on disk",
			ErrTxnTooBig, len(value), t.maxValue)
	}
	t.writes++
	t.sets++
	t.bytes += uint64(len(key) + len(value))
	if t.rsd != nil && !t.bigLocked && t.bytes >= t.rsd.big {
		t.rsd.mu.Lock() // released by Update once the commit returns
		t.bigLocked = true
	}
	// Badger keeps the slices until commit: copy them so callers may reuse.
	k := append([]byte(nil), key...)
	if t.threshold > 0 && len(value) >= t.threshold {
		t.lastBig = k
		t.vlogBytes += len(value)
	}
	return k, mapErr(t.t.Set(k, append([]byte(nil), value...)))
}

func (t *badgerTxn) Delete(key []byte) error {
	if !t.rw {
		return ErrReadOnly
	}
	if t.roErr != nil {
		return t.roErr
	}
	t.writes++
	t.bytes += uint64(len(key))
	return mapErr(t.t.Delete(append([]byte(nil), key...)))
}

func (t *badgerTxn) Discard() { t.t.Discard() }

// badgerLogger forwards Badger's warnings and errors to slog and drops its
// chatty info and debug lines.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Infof(string, ...any)        {}
func (b badgerLogger) Debugf(string, ...any)       {}

// Limits are Badger's own: a transaction holds fewer entries than its
// batch count and fewer bytes than its batch size (15% of a memtable;
// each entry costs its key, its value or, for a value in the value log, a
// 12-byte pointer, and 12 bytes more), and Badger puts one entry of its
// own into every transaction. Reads are not bounded.
func (s *badgerStore) Limits() Limits {
	const opBytes = 2 + 10 // Badger's meta bytes and the key's version
	return Limits{
		Writes:  int(s.db.MaxBatchCount()) - 2, // "count+1 >= max" fails, and the commit entry counts
		Reads:   math.MaxInt,
		Bytes:   int(s.db.MaxBatchSize()) - 1 - (len(badgerTxnKey) + 10),
		OpBytes: opBytes,
	}
}

// badgerTxnKey is the key of the entry Badger adds to each transaction,
// which its size check counts from the start.
const badgerTxnKey = "!badger!txn"

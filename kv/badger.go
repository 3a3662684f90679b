package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
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
	// Default 1 KiB, so data blocks do not bloat the LSM tree and a
	// transaction of many blocks stays far from Badger's size limit.
	ValueThreshold int64
	// MemTableSize and NumMemtables bound write buffering (64 MiB x 2).
	MemTableSize int64
	NumMemtables int
	// BlockCacheSize and IndexCacheSize (32 MiB each).
	BlockCacheSize int64
	IndexCacheSize int64
	// SyncWrites makes every commit durable against power loss (slow).
	SyncWrites bool
	// GCInterval is how often value-log GC runs in the background (5 min);
	// negative disables it.
	GCInterval time.Duration
	// Logger receives Badger's warnings and errors (default slog.Default()).
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with defaults.
func (o *BadgerOptions) EnsureDefaults() {
	if o.ValueThreshold <= 0 {
		o.ValueThreshold = 1 << 10
	}
	if o.MemTableSize <= 0 {
		o.MemTableSize = 64 << 20
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
}

// badgerStore implements Store on Badger v4.
type badgerStore struct {
	db     *badger.DB
	opts   BadgerOptions // read only
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Group commit for Sync: concurrent callers share one fsync that
	// started after they called.
	syncMu      sync.Mutex // protects the following
	syncCond    *sync.Cond
	syncRunning bool
	syncStarted uint64 // fsyncs started
	syncDone    uint64 // fsyncs finished
	syncErr     error  // result of the last finished fsync
}

var _ Store = (*badgerStore)(nil)

// OpenBadger opens (creating if needed) a Badger store in dir. Only one
// process may open a directory at a time.
func OpenBadger(dir string, opts BadgerOptions) (Store, error) {
	opts.EnsureDefaults()
	bo := badger.DefaultOptions(dir)
	if opts.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	}
	if !opts.InMemory {
		bo = bo.WithValueThreshold(opts.ValueThreshold)
	} else {
		// In-memory stores have no value log: every value stays in the LSM,
		// and Badger wants the threshold under its batch size (15% of a
		// memtable).
		bo = bo.WithValueThreshold(min(1<<20, opts.MemTableSize/10))
	}
	bo = bo.WithMemTableSize(opts.MemTableSize).
		WithNumMemtables(opts.NumMemtables).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(opts.BlockCacheSize).
		WithIndexCacheSize(opts.IndexCacheSize).
		WithSyncWrites(opts.SyncWrites).
		WithNumCompactors(2).
		WithValueLogFileSize(256 << 20).
		WithLogger(badgerLogger{opts.Logger}).
		WithNumVersionsToKeep(1).
		WithDetectConflicts(true)
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", dir, mapErr(err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &badgerStore{db: db, opts: opts, cancel: cancel}
	s.syncCond = sync.NewCond(&s.syncMu)
	if opts.GCInterval > 0 && !opts.InMemory {
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
			for s.db.RunValueLogGC(0.5) == nil {
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
	return mapErr(s.db.View(func(t *badger.Txn) error { return fn(&badgerTxn{t: t}) }))
}

func (s *badgerStore) Update(ctx context.Context, fn func(Txn) error) error {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.db.Update(func(t *badger.Txn) error { return fn(&badgerTxn{t: t, rw: true}) })
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

func (s *badgerStore) NewSnapshot() Snapshot {
	t := s.db.NewTransaction(false)
	return &badgerTxn{t: t}
}

// Sync makes every transaction committed before the call durable. Callers
// that arrive while an fsync runs wait for the next one, which serves them
// all (group commit), so N concurrent COMMITs cost about two fsyncs.
func (s *badgerStore) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	want := s.syncStarted + 1 // an fsync that starts after this call
	for s.syncDone < want {
		if s.syncRunning {
			s.syncCond.Wait()
			continue
		}
		s.syncRunning = true
		s.syncStarted++
		gen := s.syncStarted
		s.syncMu.Unlock()
		err := s.db.Sync()
		s.syncMu.Lock()
		s.syncRunning = false
		s.syncDone, s.syncErr = gen, err
		s.syncCond.Broadcast()
	}
	return mapErr(s.syncErr)
}

func (s *badgerStore) Size() (int64, error) {
	lsm, vlog := s.db.Size()
	return lsm + vlog, nil
}

func (s *badgerStore) Compact(ctx context.Context) error {
	if s.opts.InMemory {
		return nil
	}
	if err := s.db.Flatten(2); err != nil {
		return mapErr(err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.db.RunValueLogGC(0.01)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return nil
		}
		if err != nil {
			return mapErr(err)
		}
	}
}

func (s *badgerStore) Close() error {
	s.cancel()
	s.wg.Wait()
	return mapErr(s.db.Close())
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
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	return err
}

type badgerTxn struct {
	t  *badger.Txn
	rw bool
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
	return mapErr(it.Value(fn))
}

func (t *badgerTxn) Has(key []byte) (bool, error) {
	_, err := t.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, mapErr(err)
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
	if start != nil {
		seek = start
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
	if !t.rw {
		return ErrReadOnly
	}
	// Badger keeps the slices until commit: copy them so callers may reuse.
	return mapErr(t.t.Set(append([]byte(nil), key...), append([]byte(nil), value...)))
}

func (t *badgerTxn) Delete(key []byte) error {
	if !t.rw {
		return ErrReadOnly
	}
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

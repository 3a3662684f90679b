package kv

import "time"

// Test-only hooks.

// StatfsFunc reports the free bytes of a filesystem (statfs's f_bavail).
type StatfsFunc func(dir string) (avail uint64, err error)

// OpenBadgerWithStatfs opens a store that sees the disk through statfs.
func OpenBadgerWithStatfs(dir string, opts BadgerOptions, statfs StatfsFunc) (Store, error) {
	return openBadger(dir, opts, func(d string) (statfsResult, error) {
		avail, err := statfs(d)
		return statfsResult{total: 1 << 40, free: avail, avail: avail}, err
	})
}

// WithValueLogFileSize makes value logs rotate after n bytes.
func WithValueLogFileSize(o BadgerOptions, n int64) BadgerOptions {
	o.ValueLogFileSize = n
	return o
}

// SetLogFsync replaces the fsync of the files behind s's Sync.
func SetLogFsync(s Store, fsync func(path string) error) {
	b := s.(*badgerStore)
	b.logs.mu.Lock()
	b.logs.fsync = fsync
	b.logs.mu.Unlock()
}

// NewGroupSync returns the group-commit Sync around fsync.
func NewGroupSync(fsync func() error) (sync func() error) {
	return newGroupSync(fsync).sync
}

// ExpireSpaceCache makes s's next write look at the disk again.
func ExpireSpaceCache(s Store) {
	b := s.(*badgerStore)
	b.res.mu.Lock()
	b.res.at = time.Time{}
	b.res.mu.Unlock()
}

// LogListings returns how many times s's Sync has listed its directory.
func LogListings(s Store) int {
	b := s.(*badgerStore)
	b.logs.mu.Lock()
	defer b.logs.mu.Unlock()
	return b.logs.listings
}

// ValueReads reports how many values s read with pread (vlogread.go), and
// whether that reader was turned off.
func ValueReads(s Store) (int64, bool) {
	vf := s.(*badgerStore).vf
	return vf.reads.Load(), vf.off.Load()
}

// RunReads reports how many values s read with pread in runs of several.
func RunReads(s Store) int64 { return s.(*badgerStore).vf.runs.Load() }

// Preadvs returns how many runs of values (one preadv each) the pread
// reader has read.
func Preadvs(s Store) int64 { return s.(*badgerStore).vf.preadvs.Load() }

// OpenValueLogs reports how many value-log descriptors s holds open.
func OpenValueLogs(s Store) int {
	vf := s.(*badgerStore).vf
	vf.mu.RLock()
	defer vf.mu.RUnlock()
	return len(vf.fds)
}

// CachedReads reports how many values s read from locations it had
// cached (ValueRead.Fixed), without looking their keys up.
func CachedReads(s Store) int64 { return s.(*badgerStore).vf.cached.Load() }

// MisplaceCached moves the cached location of key by delta bytes, as a
// stale location would be.
func MisplaceCached(s Store, key []byte, delta int64) bool {
	c := &s.(*badgerStore).vf.locs
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring == nil {
		return false
	}
	seq, ok := c.seqLocked(key, ^uint64(0))
	if ok {
		l := &c.ring[seq%locCacheSize].loc
		l.offset = uint32(int64(l.offset) + delta)
	}
	return ok
}

// LogFds returns the paths whose descriptors s's Sync keeps open.
func LogFds(s Store) []string {
	l := s.(*badgerStore).logs
	l.fdmu.Lock()
	defer l.fdmu.Unlock()
	var out []string
	for p := range l.fds {
		out = append(out, p)
	}
	return out
}

package blobs

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// CacheOptions configures a Cache.
type CacheOptions struct {
	// Dir holds the cached blobs (created if need be). One Cache at a
	// time may use it: OpenCache locks it (the file "lock" in it) until
	// Close, and fails while another process or Cache holds it.
	Dir string
	// MaxBytes bounds the bytes of the cached blobs (default 1 GiB); the
	// filesystem adds up to a block per file. A blob larger than it is
	// not cached.
	MaxBytes int64
	// Logger receives warnings when the cache cannot write or finds a
	// corrupt file (default slog.Default()).
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with defaults.
func (o *CacheOptions) EnsureDefaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 30
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// CacheStats counts what a Cache did since it was opened.
type CacheStats struct {
	Hits, Misses int64 // Gets served from the cache, and from the backing store
	Corrupt      int64 // cached files whose content did not match their key
	Evicted      int64 // files removed to stay under MaxBytes
	Files        int   // files cached now
	Bytes        int64 // their bytes
}

// Cache is a Store that keeps the most recently used blobs of another
// Store in files on local disk. Put writes through: it returns once the
// backing store has the blob. Get checks a cached file against its key
// before returning it; a file that does not match is removed and the blob
// fetched again. The files of a previous Cache on the same directory are
// used again, their modification times giving their recency: a Put sets
// its file's, and Close those of the files read since (a hit changes no
// file: a READ of a large file reads dozens of cached files, each one
// system call fewer); after a crash the files read since the last Close
// rank by their earlier times.
type Cache struct {
	back Store
	o    CacheOptions // read only
	tmp  string       // directory of files being written
	lock *os.File     // holds the directory's lock until Close
	sf   singleflight.Group

	// mu protects the index and the directory's blob files: a file is
	// renamed into place, or removed, only under it, so the index lists
	// exactly the files present (unless someone else removes one, which
	// reads notice). Reads of cached files and the backing store's calls
	// run without it. It is the only lock of a Cache.
	mu     sync.Mutex
	lru    *list.List            // of *cacheEntry, most recently used first
	idx    map[Key]*list.Element // of lru
	bytes  int64
	closed bool

	// readSince is set when a hit moved a file to the front of lru since
	// the files were last stamped (Close stamps them).
	readSince bool

	hits, misses, corrupt, evicted atomic.Int64
	lastWarn                       atomic.Int64 // unix nanoseconds of the last write warning
	lastStamp                      atomic.Int64 // unix nanoseconds of the last recency stamp
}

// stamp records in p's times that it was used now, later than every file
// stamped before: a restart orders the files by it. The time the kernel
// gives a new file is coarser (a clock tick) than the order of two puts.
func (c *Cache) stamp(p string) {
	for {
		last := c.lastStamp.Load()
		now := max(time.Now().UnixNano(), last+1)
		if c.lastStamp.CompareAndSwap(last, now) {
			t := time.Unix(0, now)
			os.Chtimes(p, t, t) // best effort
			return
		}
	}
}

type cacheEntry struct {
	key  Key
	size int64
	read bool // a hit since its file was last stamped; guarded by Cache.mu
}

var (
	_ Store   = (*Cache)(nil)
	_ Sizer   = (*Cache)(nil)
	_ Creator = (*Cache)(nil)
)

// OpenCache opens the cache in o.Dir in front of back. Closing the cache
// closes back.
func OpenCache(back Store, o CacheOptions) (*Cache, error) {
	o.EnsureDefaults()
	if o.Dir == "" {
		return nil, errors.New("blobs: the cache needs a directory")
	}
	c := &Cache{back: back, o: o, tmp: filepath.Join(o.Dir, "tmp"), lru: list.New(), idx: map[Key]*list.Element{}}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("blobs: cache %s: %w; give a directory this user can write", o.Dir, err)
	}
	lock, err := lockDir(o.Dir)
	if err != nil {
		return nil, err
	}
	c.lock = lock
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	// Files being written when the last process stopped are incomplete.
	if err := os.RemoveAll(c.tmp); err != nil {
		return nil, fmt.Errorf("blobs: cache %s: %w", o.Dir, err)
	}
	if err := os.MkdirAll(c.tmp, 0o700); err != nil {
		return nil, fmt.Errorf("blobs: cache %s: %w; give a directory this user can write", o.Dir, err)
	}
	type found struct {
		cacheEntry
		mtime time.Time
	}
	var files []found
	err = filepath.WalkDir(o.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != o.Dir && len(d.Name()) != 2 {
				return fs.SkipDir
			}
			return nil
		}
		k, err := ParseKey(d.Name())
		if err != nil || filepath.Dir(path) != filepath.Join(o.Dir, d.Name()[:2]) {
			return nil // not ours
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		files = append(files, found{cacheEntry{key: k, size: info.Size()}, info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("blobs: cache %s: reading what it holds: %w", o.Dir, err)
	}
	slices.SortFunc(files, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	for _, f := range files { // oldest first, so the newest ends in front
		c.idx[f.key] = c.lru.PushFront(&cacheEntry{key: f.key, size: f.size})
		c.bytes += f.size
	}
	c.mu.Lock()
	c.evictLocked(nil) // MaxBytes may be smaller than last time
	c.mu.Unlock()
	ok = true
	return c, nil
}

func (c *Cache) path(k Key) string {
	h := k.String()
	return filepath.Join(c.o.Dir, h[:2], h)
}

// Stats reports the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Corrupt: c.corrupt.Load(),
		Evicted: c.evicted.Load(), Files: c.lru.Len(), Bytes: c.bytes}
}

func (c *Cache) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Put stores data in the backing store, then in the cache. Failing to
// cache is logged, not returned: the blob is stored.
func (c *Cache) Put(ctx context.Context, key Key, data []byte) error {
	if c.isClosed() {
		return ErrClosed
	}
	if err := checkPut(key, data); err != nil {
		return err
	}
	if err := c.back.Put(ctx, key, data); err != nil {
		return err
	}
	c.insert(key, data)
	return nil
}

// Create is the backing store's Create (its Put when it is no Creator),
// then, when it stored data, the cache's copy.
func (c *Cache) Create(ctx context.Context, key Key, data []byte) (bool, error) {
	if c.isClosed() {
		return false, ErrClosed
	}
	if err := checkPut(key, data); err != nil {
		return false, err
	}
	cr, ok := c.back.(Creator)
	if !ok {
		return true, c.Put(ctx, key, data)
	}
	stored, err := cr.Create(ctx, key, data)
	if err == nil && stored {
		c.insert(key, data)
	}
	return stored, err
}

// Get serves key from the cache when it holds a file that matches the
// key, from the backing store otherwise (concurrent misses of one key
// fetch it once).
func (c *Cache) Get(ctx context.Context, key Key) ([]byte, error) {
	return c.GetInto(ctx, key, nil)
}

// GetInto is Get that reads a cached file into buf when it fits (Filler).
func (c *Cache) GetInto(ctx context.Context, key Key, buf []byte) ([]byte, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	if data, ok := c.read(key, buf); ok {
		c.hits.Add(1)
		return data, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err, shared := c.sf.Do(string(key[:]), func() (any, error) {
		c.misses.Add(1)
		data, err := c.back.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if got := Sum(data); got != key {
			return nil, fmt.Errorf("%w: the backing store returned %d bytes for %s that hash to %s", ErrCorrupt, len(data), key, got)
		}
		c.insert(key, data)
		return data, nil
	})
	if err != nil && shared && ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The caller whose fetch this one shared gave up; this one has
		// not.
		return c.back.Get(ctx, key)
	}
	if err != nil {
		return nil, err
	}
	data := v.([]byte)
	if shared {
		data = slices.Clone(data) // each caller owns its slice
	}
	return data, nil
}

// read returns the cached content of key if it is cached and matches, in
// buf if it fits.
func (c *Cache) read(key Key, buf []byte) ([]byte, bool) {
	c.mu.Lock()
	el, ok := c.idx[key]
	var size int64
	if ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		e.read, c.readSince, size = true, true, e.size
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	p := c.path(key)
	data, err := readCached(p, size, buf)
	if err == nil && Sum(data) == key {
		return data, true
	}
	if err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		c.corrupt.Add(1)
		c.o.Logger.Warn("blobs: a cached file does not match its key: removed, fetching the blob again", "file", p, "bytes", len(data))
	} else if !errors.Is(err, fs.ErrNotExist) {
		c.o.Logger.Warn("blobs: cannot read a cached file: removed, fetching the blob again", "file", p, "err", err)
	}
	c.mu.Lock()
	if cur, ok := c.idx[key]; ok && cur == el {
		c.removeLocked(el)
	}
	c.mu.Unlock()
	return nil, false
}

// insert caches data under key, evicting the least recently used files
// past MaxBytes. Errors are logged (at most every 10 s): the cache is an
// optimisation.
func (c *Cache) insert(key Key, data []byte) {
	size := int64(len(data))
	if size > c.o.MaxBytes {
		return
	}
	err := func() error {
		f, err := os.CreateTemp(c.tmp, "blob-")
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			os.Remove(f.Name())
			return nil
		}
		p := c.path(key)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			os.Remove(f.Name())
			return err
		}
		if err := os.Rename(f.Name(), p); err != nil {
			os.Remove(f.Name())
			return err
		}
		c.stamp(p)
		if el, ok := c.idx[key]; ok {
			c.lru.MoveToFront(el)
			el.Value.(*cacheEntry).read = false // stamped now
			return nil                          // the same content again
		}
		el := c.lru.PushFront(&cacheEntry{key: key, size: size})
		c.idx[key] = el
		c.bytes += size
		c.evictLocked(el)
		return nil
	}()
	if err != nil {
		now := time.Now().UnixNano()
		if last := c.lastWarn.Load(); now-last > int64(10*time.Second) && c.lastWarn.CompareAndSwap(last, now) {
			c.o.Logger.Warn("blobs: cannot write to the cache; reads go to the backing store", "dir", c.o.Dir, "err", err)
		}
	}
}

// evictLocked removes the least recently used files, never keep, until
// the cache holds at most MaxBytes.
func (c *Cache) evictLocked(keep *list.Element) {
	for c.bytes > c.o.MaxBytes {
		el := c.lru.Back()
		if el == nil || el == keep {
			return
		}
		c.removeLocked(el)
		c.evicted.Add(1)
	}
}

func (c *Cache) removeLocked(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.idx, e.key)
	c.bytes -= e.size
	if err := os.Remove(c.path(e.key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.o.Logger.Warn("blobs: cannot remove a cached file", "err", err)
	}
}

// Has asks the backing store, never the cache: another server's garbage
// collection may have deleted a blob this cache still holds, and a caller
// that skipped a Put because of a cached answer would reference a blob
// that is gone.
func (c *Cache) Has(ctx context.Context, key Key) (bool, error) {
	if c.isClosed() {
		return false, ErrClosed
	}
	return c.back.Has(ctx, key)
}

// Delete removes key from the backing store, then from the cache.
func (c *Cache) Delete(ctx context.Context, key Key) error {
	if c.isClosed() {
		return ErrClosed
	}
	if err := c.back.Delete(ctx, key); err != nil {
		return err
	}
	c.mu.Lock()
	if el, ok := c.idx[key]; ok {
		c.removeLocked(el)
	}
	c.mu.Unlock()
	return nil
}

// List lists the backing store.
func (c *Cache) List(ctx context.Context, fn func(Key) error) error {
	if c.isClosed() {
		return ErrClosed
	}
	return c.back.List(ctx, fn)
}

// ListSizes is the backing store's ListSizes; it fails if the backing
// store is not a Sizer.
func (c *Cache) ListSizes(ctx context.Context, fn func(Key, int64) error) error {
	if c.isClosed() {
		return ErrClosed
	}
	sz, ok := c.back.(Sizer)
	if !ok {
		return fmt.Errorf("blobs: the cache's backing store %T does not list sizes", c.back)
	}
	return sz.ListSizes(ctx, fn)
}

// Close closes the cache and the backing store. The cached files stay for
// the next OpenCache.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.stampReadLocked()
	c.lock.Close() // releases the directory's lock
	c.mu.Unlock()
	return c.back.Close()
}

// stampReadLocked gives the files read since they were last stamped
// modification times in the order of lru, so the next OpenCache sees
// their recency: from the least recently used of them to the front of
// lru, each file later than the one before (files behind it keep their
// older times).
func (c *Cache) stampReadLocked() {
	if !c.readSince {
		return
	}
	c.readSince = false
	var from *list.Element
	for el := c.lru.Back(); el != nil; el = el.Prev() {
		if el.Value.(*cacheEntry).read {
			from = el
			break
		}
	}
	for el := from; el != nil; el = el.Prev() {
		e := el.Value.(*cacheEntry)
		e.read = false
		c.stamp(c.path(e.key))
	}
}

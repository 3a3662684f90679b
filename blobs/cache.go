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
	// OpenFiles bounds the cached files kept open between reads, the
	// least recently used closed past it (default: half the process's
	// RLIMIT_NOFILE, at most 32,768; negative: none, each hit opens and
	// closes its file).
	OpenFiles int
	// Now is the clock that tells a file changed lately (default
	// time.Now).
	Now func() time.Time
}

// maxDefaultOpenFiles caps the default OpenFiles: 1 GiB of 32 KiB
// blocks.
const maxDefaultOpenFiles = 32768

// racyAge is how long before a read a cached file must have last changed
// (its ctime) for the read's check to be remembered: a file changed
// again within the same timestamp tick as the checked read (1 s on
// HFS+ and ext3, a few ms on ext4 and APFS) would show the same times.
// Git calls this the "racy git" problem and solves it the same way.
const racyAge = 2 * time.Second

// EnsureDefaults fills zero fields with defaults.
func (o *CacheOptions) EnsureDefaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 30
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OpenFiles == 0 {
		o.OpenFiles = defaultOpenFiles()
	}
	if o.OpenFiles < 0 {
		o.OpenFiles = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// CacheStats counts what a Cache did since it was opened.
type CacheStats struct {
	Hits, Misses int64 // Gets served from the cache, and from the backing store
	Corrupt      int64 // cached files whose content did not match their key
	Evicted      int64 // files removed to stay under MaxBytes
	Checked      int64 // hits whose file was hashed (the rest were known good)
	Files        int   // files cached now
	Bytes        int64 // their bytes
	Open         int   // files kept open now
}

// Cache is a Store that keeps the most recently used blobs of another
// Store in files on local disk. Put writes through: it returns once the
// backing store has the blob. Get checks a cached file against its key
// the first time this Cache reads it, and again whenever the file's
// identity (device, inode number, size, modification and change times)
// differs from the one it had when it was checked; a file that does not
// match is removed and the blob fetched again. Up to OpenFiles files stay
// open between reads, so a hit is a pread and an fstat. The files of a previous Cache on the same directory are
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
	open   *list.List // of *cacheEntry with an open file, most recently used first

	// readSince is set when a hit moved a file to the front of lru since
	// the files were last stamped (Close stamps them).
	readSince bool

	hits, misses, corrupt, evicted, checked atomic.Int64
	lastWarn                                atomic.Int64 // unix nanoseconds of the last write warning
	lastStamp                               atomic.Int64 // unix nanoseconds of the last recency stamp
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

// cacheEntry is a cached file. All but key and size are guarded by
// Cache.mu.
type cacheEntry struct {
	key  Key
	size int64
	read bool // a hit since its file was last stamped

	// f is the file kept open (nil: none), oel its element of Cache.open.
	// Closing f while a reader uses it is safe: os.File defers the close
	// until the read returns, and later reads fail with os.ErrClosed.
	f   *os.File
	oel *list.Element
	// checked is the identity the file had when a read last found its
	// content matching the key (the zero fileID: never).
	checked fileID
}

// fileID is who a file is and when it last changed: any write to it, a
// truncation, or a new file renamed over it changes one of these (a
// process can set the modification time back, not the change time).
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // unix nanoseconds
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
	c := &Cache{back: back, o: o, tmp: filepath.Join(o.Dir, "tmp"), lru: list.New(), idx: map[Key]*list.Element{}, open: list.New()}
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
		Evicted: c.evicted.Load(), Checked: c.checked.Load(), Files: c.lru.Len(), Bytes: c.bytes, Open: c.open.Len()}
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
	// A try fails over to the next when the file it used was closed or
	// replaced under it; the next sees the index as it is now.
	for range 3 {
		if data, ok, again := c.readOnce(key, buf); !again {
			return data, ok
		}
	}
	return nil, false
}

// readOnce is one try of read; again asks for another.
func (c *Cache) readOnce(key Key, buf []byte) (data []byte, ok, again bool) {
	start := c.o.Now()
	c.mu.Lock()
	el, ok := c.idx[key]
	if !ok {
		c.mu.Unlock()
		return nil, false, false
	}
	c.lru.MoveToFront(el)
	e := el.Value.(*cacheEntry)
	e.read, c.readSince = true, true
	size, checked, f := e.size, e.checked, e.f
	if f != nil {
		c.open.MoveToFront(e.oel)
	}
	c.mu.Unlock()

	p := c.path(key)
	own := false // f is this read's to close
	if f == nil {
		var err error
		if f, err = os.Open(p); err != nil {
			c.drop(el, p, nil, err)
			return nil, false, false
		}
		f, own = c.keepOpen(el, f)
		if f == nil {
			return nil, false, true // removed meanwhile
		}
	}
	data, id, nlink, err := readCached(f, size, buf)
	if own {
		f.Close()
	}
	switch {
	case errors.Is(err, os.ErrClosed):
		return nil, false, true // evicted or replaced meanwhile
	case err != nil:
		c.drop(el, p, data, err)
		return nil, false, false
	case nlink == 0:
		// Removed, or replaced by a rename, behind this cache's back:
		// read what the path names now.
		c.closeFile(el, f)
		return nil, false, true
	case id.size != size:
		c.drop(el, p, data, io.ErrUnexpectedEOF)
		return nil, false, false
	case id == checked:
		return data, true, false
	}
	c.checked.Add(1)
	if Sum(data) != key {
		c.drop(el, p, data, nil)
		return nil, false, false
	}
	if time.Unix(0, id.ctime).Add(racyAge).Before(start) {
		c.mu.Lock()
		if cur, ok := c.idx[key]; ok && cur == el {
			e.checked = id
		}
		c.mu.Unlock()
	}
	return data, true, false
}

// keepOpen keeps f, just opened for el, among the open files, and returns
// the file to read el with: f, or the file another reader kept first
// (closing f), or f to close after the read (own) when no file is kept
// open; nil when el was removed meanwhile.
func (c *Cache) keepOpen(el *list.Element, f *os.File) (_ *os.File, own bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := el.Value.(*cacheEntry)
	switch cur, ok := c.idx[e.key]; {
	case !ok || cur != el || c.closed:
		f.Close()
		return nil, false
	case e.f != nil:
		f.Close()
		return e.f, false
	case c.o.OpenFiles == 0:
		return f, true
	}
	e.f, e.oel = f, c.open.PushFront(e)
	for c.open.Len() > c.o.OpenFiles {
		c.closeLocked(c.open.Back().Value.(*cacheEntry))
	}
	return f, false
}

// closeFile closes el's open file if it is still f.
func (c *Cache) closeFile(el *list.Element, f *os.File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := el.Value.(*cacheEntry); e.f == f {
		c.closeLocked(e)
	}
}

// closeLocked closes e's open file, if any.
func (c *Cache) closeLocked(e *cacheEntry) {
	if e.f == nil {
		return
	}
	e.f.Close()
	c.open.Remove(e.oel)
	e.f, e.oel = nil, nil
}

// drop removes el, whose file p could not be read (err) or did not match
// its key (err nil or io.ErrUnexpectedEOF, data what was read), and says
// why.
func (c *Cache) drop(el *list.Element, p string, data []byte, err error) {
	if err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		c.corrupt.Add(1)
		c.o.Logger.Warn("blobs: a cached file does not match its key: removed, fetching the blob again", "file", p, "bytes", len(data))
	} else if !errors.Is(err, fs.ErrNotExist) {
		c.o.Logger.Warn("blobs: cannot read a cached file: removed, fetching the blob again", "file", p, "err", err)
	}
	c.mu.Lock()
	if cur, ok := c.idx[el.Value.(*cacheEntry).key]; ok && cur == el {
		c.removeLocked(el)
	}
	c.mu.Unlock()
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
			// The same content again, in a new file: the open one, if
			// any, is the replaced file's.
			c.lru.MoveToFront(el)
			e := el.Value.(*cacheEntry)
			e.read = false // stamped now
			c.closeLocked(e)
			e.checked = fileID{}
			return nil
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
	c.closeLocked(e) // a removed file is never read again, and its space is freed
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
	for c.open.Len() > 0 {
		c.closeLocked(c.open.Front().Value.(*cacheEntry))
	}
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

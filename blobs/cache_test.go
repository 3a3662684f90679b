package blobs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
)

var bg = context.Background()

// blob returns n bytes that differ for each i, and their key.
func blob(i, n int) (blobs.Key, []byte) {
	seed := fmt.Appendf(nil, "blob %d;", i)
	data := bytes.Repeat(seed, n/len(seed)+1)[:n]
	return blobs.Sum(data), data
}

// counting wraps a store, counts the calls that reach it, fails them with
// fail when set, and leaves the store open on Close (so a test can open a
// second cache on it).
type counting struct {
	blobs.Store
	gets, puts atomic.Int64
	fail       atomic.Pointer[error]
}

func (c *counting) err() error {
	if p := c.fail.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *counting) Get(ctx context.Context, k blobs.Key) ([]byte, error) {
	c.gets.Add(1)
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.Store.Get(ctx, k)
}

func (c *counting) Put(ctx context.Context, k blobs.Key, data []byte) error {
	c.puts.Add(1)
	if err := c.err(); err != nil {
		return err
	}
	return c.Store.Put(ctx, k, data)
}

func (c *counting) Close() error { return nil }

func openCache(t *testing.T, back blobs.Store, dir string, max int64) *blobs.Cache {
	t.Helper()
	c, err := blobs.OpenCache(back, blobs.CacheOptions{Dir: dir, MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustGet(t *testing.T, s blobs.Store, k blobs.Key, want []byte) {
	t.Helper()
	got, err := s.Get(bg, k)
	if err != nil {
		t.Fatalf("Get %s: %v", k, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get %s: %d bytes that differ from the %d put", k, len(got), len(want))
	}
}

// dirBytes sums the sizes of the blob files under dir (and of any
// temporary files left, which count as blob files here).
func dirBytes(t *testing.T, dir string) (files int, n int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "lock" {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files++
		n += info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, n
}

// TestCacheEviction: the cache stays under MaxBytes on disk and evicts the
// least recently used blob, not the one read last.
func TestCacheEviction(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	const size, max = 1000, 10 * 1000
	c := openCache(t, back, dir, max)
	for i := range 10 {
		k, data := blob(i, size)
		if err := c.Put(bg, k, data); err != nil {
			t.Fatal(err)
		}
	}
	k0, d0 := blob(0, size)
	mustGet(t, c, k0, d0) // 0 is now the most recently used; 1 the least
	k10, d10 := blob(10, size)
	if err := c.Put(bg, k10, d10); err != nil {
		t.Fatal(err)
	}
	if back.gets.Load() != 0 {
		t.Fatalf("%d Gets reached the backing store; all were cached", back.gets.Load())
	}
	mustGet(t, c, k0, d0)
	if back.gets.Load() != 0 {
		t.Fatal("the most recently read blob was evicted")
	}
	k1, d1 := blob(1, size)
	mustGet(t, c, k1, d1)
	if back.gets.Load() != 1 {
		t.Fatal("the least recently used blob was not evicted")
	}
	for i := 11; i < 40; i++ {
		k, data := blob(i, size)
		if err := c.Put(bg, k, data); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	files, n := dirBytes(t, dir)
	if st.Bytes > max || n > max || files != st.Files || n != st.Bytes {
		t.Fatalf("cache holds %d files of %d bytes on disk, stats %+v; limit %d", files, n, st, max)
	}
	if st.Evicted < 30 {
		t.Fatalf("stats %+v: 41 blobs put and read into a cache of 10", st)
	}
	// A blob larger than the whole cache goes through without evicting.
	kb, db := blob(99, max+1)
	if err := c.Put(bg, kb, db); err != nil {
		t.Fatal(err)
	}
	if st2 := c.Stats(); st2.Files != st.Files {
		t.Fatalf("a blob over MaxBytes changed the cache: %+v, then %+v", st, st2)
	}
	mustGet(t, c, kb, db)
}

// TestCacheRestart: a cache opened again on the same directory serves what
// the last one held, keeps its recency, and evicts down to a smaller
// limit.
func TestCacheRestart(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	const size = 1000
	c := openCache(t, back, dir, 1<<20)
	for i := range 5 {
		k, data := blob(i, size)
		if err := c.Put(bg, k, data); err != nil {
			t.Fatal(err)
		}
	}
	k0, d0 := blob(0, size)
	mustGet(t, c, k0, d0) // the most recently used
	if _, err := blobs.OpenCache(back, blobs.CacheOptions{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second cache on a directory in use: %v, want an error saying so", err)
	}
	// A write cut short by a crash leaves a file in tmp.
	if err := os.WriteFile(filepath.Join(dir, "tmp", "blob-123"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Close()

	c = openCache(t, back, dir, 2*size)
	if st := c.Stats(); st.Files != 2 || st.Bytes != 2*size {
		t.Fatalf("reopened with room for 2 blobs: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmp", "blob-123")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the partial file survived the restart: %v", err)
	}
	mustGet(t, c, k0, d0)
	k4, d4 := blob(4, size)
	mustGet(t, c, k4, d4)
	if g := back.gets.Load(); g != 0 {
		t.Fatalf("%d Gets after the restart reached the backing store; the two most recent blobs were cached", g)
	}
	k1, d1 := blob(1, size)
	mustGet(t, c, k1, d1)
	if g := back.gets.Load(); g != 1 {
		t.Fatalf("an evicted blob was served without the backing store (%d Gets)", g)
	}
}

// TestCacheCorrupt: a cached file that no longer matches its key is
// detected, removed and fetched again; so is a truncated one; and content
// from the backing store that does not match its key is refused.
func TestCacheCorrupt(t *testing.T) {
	mem := blobs.NewMem()
	back := &counting{Store: mem}
	dir := t.TempDir()
	c := openCache(t, back, dir, 1<<20)
	k, data := blob(1, 5000)
	if err := c.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, k.String()[:2], k.String())
	bad := bytes.Clone(data)
	bad[1234] ^= 1
	if err := os.WriteFile(file, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, k, data)
	if st := c.Stats(); st.Corrupt != 1 || back.gets.Load() != 1 {
		t.Fatalf("after a flipped bit: stats %+v, %d backing Gets; want 1 corrupt, 1 Get", st, back.gets.Load())
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the cached file was not replaced by the right content: %v", err)
	}
	mustGet(t, c, k, data)
	if back.gets.Load() != 1 {
		t.Fatal("the refetched blob was not cached")
	}
	if err := os.Truncate(file, 100); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, k, data)
	if st := c.Stats(); st.Corrupt != 2 || back.gets.Load() != 2 {
		t.Fatalf("after a truncation: stats %+v, %d backing Gets", st, back.gets.Load())
	}

	// Wrong content from the backing store is not returned nor cached.
	k2, d2 := blob(2, 5000)
	mem.Corrupt(k2, d2[:4000])
	if _, err := c.Get(bg, k2); !errors.Is(err, blobs.ErrCorrupt) {
		t.Fatalf("Get of content that does not match its key: %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(filepath.Join(dir, k2.String()[:2], k2.String())); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("wrong content was cached: %v", err)
	}
	// Put refuses data under another key.
	if err := c.Put(bg, k2, data); !errors.Is(err, blobs.ErrCorrupt) {
		t.Fatalf("Put under the wrong key: %v, want ErrCorrupt", err)
	}
}

// TestCacheWriteThrough: a Put the backing store refuses fails and caches
// nothing; a Get the backing store cannot serve returns its error; Delete
// removes the cached file; Has asks the backing store.
func TestCacheWriteThrough(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	c := openCache(t, back, dir, 1<<20)
	k, data := blob(1, 3000)
	down := fmt.Errorf("%w: test", blobs.ErrUnavailable)
	back.fail.Store(&down)
	if err := c.Put(bg, k, data); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("Put with the backing store down: %v", err)
	}
	if st := c.Stats(); st.Files != 0 {
		t.Fatalf("a Put that failed was cached: %+v", st)
	}
	if _, err := c.Get(bg, k); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("Get with the backing store down: %v", err)
	}
	back.fail.Store(nil)
	if _, err := c.Get(bg, k); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("Get of a blob never stored: %v, want ErrNotFound", err)
	}
	if err := c.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
	if ok, err := back.Store.Has(bg, k); !ok || err != nil {
		t.Fatalf("Put returned before the backing store had the blob: %v %v", ok, err)
	}
	// The cache serves it with the backing store down.
	back.fail.Store(&down)
	mustGet(t, c, k, data)
	back.fail.Store(nil)
	// Another server's GC deletes the blob: Has must not answer from
	// the cache.
	if err := back.Store.Delete(bg, k); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Has(bg, k); ok || err != nil {
		t.Fatalf("Has of a blob deleted from the backing store = %v, %v", ok, err)
	}
	if err := c.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(bg, k); err != nil {
		t.Fatal(err)
	}
	if files, _ := dirBytes(t, dir); files != 0 {
		t.Fatalf("Delete left %d cached files", files)
	}
	if _, err := c.Get(bg, k); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	c.Close()
	if _, err := c.Get(bg, k); !errors.Is(err, blobs.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}

// TestCacheConcurrent: Gets, Puts and evictions from many goroutines on a
// cache that holds a third of the blobs always return the right content
// and keep the cache within its limit, whether it keeps its files open
// (and closes them on eviction while others read them) or not.
func TestCacheConcurrent(t *testing.T) {
	for _, open := range []int{0, 2, -1} {
		t.Run(fmt.Sprintf("open=%d", open), func(t *testing.T) { testCacheConcurrent(t, open) })
	}
}

func testCacheConcurrent(t *testing.T, open int) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	const n, size = 30, 1000
	c := openCacheOpts(t, back, blobs.CacheOptions{Dir: dir, MaxBytes: n / 3 * size, OpenFiles: open, Now: later})
	for i := range n {
		k, data := blob(i, size)
		if err := back.Store.Put(bg, k, data); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for j := range 300 {
				i := (g*7 + j*13) % n
				k, data := blob(i, size)
				var err error
				if j%5 == 0 {
					err = c.Put(bg, k, data)
				} else {
					var got []byte
					if got, err = c.Get(bg, k); err == nil && !bytes.Equal(got, data) {
						err = fmt.Errorf("Get of blob %d returned other bytes", i)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	files, bytes := dirBytes(t, dir)
	if st.Bytes > n/3*size || files != st.Files || bytes != st.Bytes || st.Corrupt != 0 || (open > 0 && st.Open > open) {
		t.Fatalf("stats %+v, %d files of %d bytes on disk", st, files, bytes)
	}
}

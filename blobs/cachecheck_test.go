package blobs_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
)

func openCacheOpts(t *testing.T, back blobs.Store, o blobs.CacheOptions) *blobs.Cache {
	t.Helper()
	c, err := blobs.OpenCache(back, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// later is a clock an hour ahead, to which every file looks old enough
// for a check to be remembered.
func later() time.Time { return time.Now().Add(time.Hour) }

func cachedFile(dir string, k blobs.Key) string {
	return filepath.Join(dir, k.String()[:2], k.String())
}

// TestCacheChecksOnce: a cached file is hashed on its first read, not on
// the reads after it while it stays as it was; a cache opened again
// hashes it again on its first read; a file changed lately (within the
// timestamps' resolution of the read) is hashed on every read.
func TestCacheChecksOnce(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	c := openCacheOpts(t, back, blobs.CacheOptions{Dir: dir, Now: later})
	k, data := blob(1, 5000)
	if err := c.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mustGet(t, c, k, data)
	}
	if st := c.Stats(); st.Checked != 1 || st.Hits != 3 {
		t.Fatalf("3 reads of an unchanged file: stats %+v, want 3 hits and 1 check", st)
	}
	c.Close()
	c = openCacheOpts(t, back, blobs.CacheOptions{Dir: dir, Now: later})
	mustGet(t, c, k, data)
	mustGet(t, c, k, data)
	if st := c.Stats(); st.Checked != 1 || st.Hits != 2 {
		t.Fatalf("after a restart, 2 reads: stats %+v, want 2 hits and 1 check", st)
	}

	// With the real clock the file just written is too recent: a write
	// in the same tick would not show.
	c = openCacheOpts(t, back, blobs.CacheOptions{Dir: t.TempDir()})
	if err := c.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, k, data)
	mustGet(t, c, k, data)
	if st := c.Stats(); st.Checked != 2 {
		t.Fatalf("2 reads of a file written now: stats %+v, want 2 checks", st)
	}
	if back.gets.Load() != 0 {
		t.Fatalf("%d Gets reached the backing store", back.gets.Load())
	}
}

// TestCacheChangedFile: a cached file changed on disk after its content
// was checked (and while the cache holds it open) is noticed and never
// served: it is checked again, and fetched again when it does not match.
func TestCacheChangedFile(t *testing.T) {
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, file string, data []byte)
		corrupt bool // counted as corrupt (else the file was gone)
	}{
		{"rewritten in place, same size and mtime", func(t *testing.T, file string, data []byte) {
			// The change time, which no process can set, still moves.
			st, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			bad := []byte(strings.Repeat("x", len(data)))
			if err := os.WriteFile(file, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(file, old, st.ModTime()); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"truncated", func(t *testing.T, file string, data []byte) {
			if err := os.Truncate(file, int64(len(data)/2)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"extended", func(t *testing.T, file string, data []byte) {
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("more"))
			f.Close()
		}, true},
		{"replaced by a rename", func(t *testing.T, file string, data []byte) {
			other := file + ".new"
			if err := os.WriteFile(other, []byte(strings.Repeat("y", len(data))), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, file); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"removed", func(t *testing.T, file string, data []byte) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			back := &counting{Store: blobs.NewMem()}
			dir := t.TempDir()
			c := openCacheOpts(t, back, blobs.CacheOptions{Dir: dir, Now: later})
			k, data := blob(1, 5000)
			if err := c.Put(bg, k, data); err != nil {
				t.Fatal(err)
			}
			mustGet(t, c, k, data)
			mustGet(t, c, k, data)
			if st := c.Stats(); st.Checked != 1 || st.Open != 1 {
				t.Fatalf("before the change: stats %+v, want 1 check and the file open", st)
			}
			tc.change(t, cachedFile(dir, k), data)
			mustGet(t, c, k, data)
			st := c.Stats()
			if back.gets.Load() != 1 || st.Misses != 1 {
				t.Fatalf("after the change: %d backing Gets, stats %+v; want the blob fetched again", back.gets.Load(), st)
			}
			if tc.corrupt != (st.Corrupt == 1) {
				t.Fatalf("after the change: stats %+v, want corrupt %v", st, tc.corrupt)
			}
			if got, err := os.ReadFile(cachedFile(dir, k)); err != nil || string(got) != string(data) {
				t.Fatalf("the cached file after the fetch: %v", err)
			}
			mustGet(t, c, k, data)
			if back.gets.Load() != 1 {
				t.Fatal("the fetched blob was not cached again")
			}
		})
	}
}

// openUnder counts this process's open files under dir, and those of
// them removed (Linux: /proc/self/fd; elsewhere 0, 0).
func openUnder(t *testing.T, dir string) (n, removed int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return 0, 0
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		p, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil || !strings.HasPrefix(p, dir+"/") || strings.HasSuffix(p, "/lock") {
			continue
		}
		n++
		if strings.HasSuffix(p, " (deleted)") {
			removed++
		}
	}
	return n, removed
}

// TestCacheOpenFiles: the cache keeps at most OpenFiles files open, never
// one it removed (evicted or deleted: their space is freed, and a deleted
// blob's old bytes are not served), and none after Close.
func TestCacheOpenFiles(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	const size, files, open = 1000, 8, 3
	c := openCacheOpts(t, back, blobs.CacheOptions{Dir: dir, MaxBytes: files * size, OpenFiles: open, Now: later})
	for i := range 2 * files {
		k, data := blob(i, size)
		if err := c.Put(bg, k, data); err != nil {
			t.Fatal(err)
		}
		for j := max(0, i-files+1); j <= i; j++ { // the files cached now
			kj, dj := blob(j, size)
			mustGet(t, c, kj, dj)
		}
		st := c.Stats()
		n, removed := openUnder(t, dir)
		if st.Open != min(i+1, open) || (runtime.GOOS == "linux" && n != st.Open) || removed != 0 || st.Bytes > files*size {
			t.Fatalf("after %d blobs: stats %+v, %d files open under the cache (%d of them removed); want at most %d open, none removed", i+1, st, n, removed, open)
		}
	}
	if back.gets.Load() != 0 {
		t.Fatalf("%d Gets reached the backing store", back.gets.Load())
	}
	k, data := blob(2*files-1, size)
	mustGet(t, c, k, data) // open
	if err := c.Delete(bg, k); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(bg, k); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("Get after Delete of a file held open: %v, want ErrNotFound", err)
	}
	if _, removed := openUnder(t, dir); removed != 0 {
		t.Fatalf("%d removed files still open after Delete", removed)
	}
	c.Close()
	if n, _ := openUnder(t, dir); n != 0 || c.Stats().Open != 0 {
		t.Fatalf("after Close: %d files open under the cache, stats %+v", n, c.Stats())
	}
}

// TestCacheNoOpenFiles: with OpenFiles negative each hit opens and closes
// its file, and a check is still remembered.
func TestCacheNoOpenFiles(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	c := openCacheOpts(t, back, blobs.CacheOptions{Dir: dir, OpenFiles: -1, Now: later})
	k, data := blob(1, 5000)
	if err := c.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, k, data)
	mustGet(t, c, k, data)
	if n, _ := openUnder(t, dir); n != 0 || c.Stats().Open != 0 || c.Stats().Checked != 1 {
		t.Fatalf("%d files open, stats %+v; want none open and 1 check", n, c.Stats())
	}
}

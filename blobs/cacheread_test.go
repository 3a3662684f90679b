package blobs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
)

// BenchmarkCacheScan reads 1024 cached blobs of 32 KiB (32 MiB) in turn,
// as a sequential READ of a large file does: each Get is a different
// file, read from the cache (checked against its key the first time; the
// clock is an hour ahead, so the files just written count as old).
func BenchmarkCacheScan(b *testing.B) {
	c, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: b.TempDir(), Now: later})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const n, size = 1024, 32 << 10
	keys := make([]blobs.Key, n)
	for i := range keys {
		k, data := blob(i, size)
		if err := c.Put(bg, k, data); err != nil {
			b.Fatal(err)
		}
		keys[i] = k
	}
	b.SetBytes(size)
	for i := 0; b.Loop(); i++ {
		if _, err := c.Get(bg, keys[i%n]); err != nil {
			b.Fatal(err)
		}
	}
	if st := c.Stats(); st.Misses != 0 {
		b.Fatalf("%d misses", st.Misses)
	}
}

// TestCacheHitWritesNothing: a hit reads its file and changes nothing on
// disk (not even its modification time); Close records the recency of
// the files read, so a cache opened again keeps the blobs read last.
func TestCacheHitWritesNothing(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	const size = 1000
	c := openCache(t, back, dir, 1<<20)
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		k, data := blob(i, size)
		if err := c.Put(bg, k, data); err != nil {
			t.Fatal(err)
		}
	}
	mtime := func(i int) time.Time {
		k, _ := blob(i, size)
		st, err := os.Stat(filepath.Join(dir, k.String()[:2], k.String()))
		if err != nil {
			t.Fatal(err)
		}
		return st.ModTime()
	}
	k2, d2 := blob(2, size)
	if err := os.Chtimes(filepath.Join(dir, k2.String()[:2], k2.String()), old, old); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, k2, d2)
	if m := mtime(2); !m.Equal(old) {
		t.Fatalf("a hit changed its file's modification time to %v", m)
	}
	k0, d0 := blob(0, size)
	mustGet(t, c, k0, d0) // now most recent: 0, then 2
	c.Close()
	if !mtime(0).After(mtime(2)) || !mtime(2).After(mtime(4)) {
		t.Fatalf("after Close: mtimes of blobs 0, 2, 4: %v, %v, %v; want the order of their last use", mtime(0), mtime(2), mtime(4))
	}
	c = openCache(t, back, dir, 2*size)
	mustGet(t, c, k0, d0)
	mustGet(t, c, k2, d2)
	if g := back.gets.Load(); g != 0 {
		t.Fatalf("%d Gets reached the backing store; the two blobs read last were cached", g)
	}
}

// TestCacheGetInto: a hit is read into the caller's buffer when it fits,
// into a new slice when not, and a miss or a corrupt file is served as by
// Get.
func TestCacheGetInto(t *testing.T) {
	back := &counting{Store: blobs.NewMem()}
	dir := t.TempDir()
	c := openCache(t, back, dir, 1<<20)
	k, data := blob(1, 5000)
	if err := c.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 8192)
	got, err := c.GetInto(bg, k, buf)
	if err != nil || !bytes.Equal(got, data) || &got[0] != &buf[:1][0] {
		t.Fatalf("GetInto with room: %d bytes, %v, in the buffer: %v", len(got), err, err == nil && &got[0] == &buf[:1][0])
	}
	small := make([]byte, 0, 100)
	got, err = c.GetInto(bg, k, small)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GetInto without room: %d bytes, %v", len(got), err)
	}
	bad := bytes.Clone(data)
	bad[10] ^= 1
	if err := os.WriteFile(filepath.Join(dir, k.String()[:2], k.String()), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = c.GetInto(bg, k, buf)
	if err != nil || !bytes.Equal(got, data) || back.gets.Load() != 1 || c.Stats().Corrupt != 1 {
		t.Fatalf("GetInto of a corrupt file: %v, %d backing Gets, stats %+v", err, back.gets.Load(), c.Stats())
	}
	k2, d2 := blob(2, 3000)
	if err := back.Store.Put(bg, k2, d2); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetInto(bg, k2, buf); err != nil || !bytes.Equal(got, d2) {
		t.Fatalf("GetInto of a miss: %v", err)
	}
}

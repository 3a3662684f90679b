package cowfs

import (
	"bytes"
	"errors"
	"runtime"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestReadInto checks ReadInto's contract: buf gets the attributes and the
// count clamped to the size, its error ends the call before any data is
// read, and the data lands in the buffer it returns.
func TestReadInto(t *testing.T) {
	f, cs, _ := newCountingFS(t, Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 10000) // 100,000 bytes, 4 blocks
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		off      uint64
		count, n int
		eof      bool
	}{
		{0, 1 << 20, len(data), true},
		{10, 100, 100, false},
		{99_990, 100, 10, true},
		{200_000, 100, 0, true},
		{10, 0, 0, false},
	} {
		var seen Attr
		var want int
		got, eof, err := f.ReadInto(a.Ino, tc.off, tc.count, func(a *Attr, n int) ([]byte, error) {
			seen, want = *a, n
			return make([]byte, n), nil
		})
		if err != nil || got != tc.n || want != tc.n || eof != tc.eof || seen.Size != uint64(len(data)) || seen.Ino != a.Ino {
			t.Fatalf("ReadInto(%d, %d) = %d, %v, %v (buf asked %d, size %d); want %d, %v", tc.off, tc.count, got, eof, err, want, seen.Size, tc.n, tc.eof)
		}
	}
	var p []byte
	if n, _, err := f.ReadInto(a.Ino, 5, 20, func(_ *Attr, n int) ([]byte, error) {
		p = make([]byte, n)
		return p, nil
	}); err != nil || n != 20 || !bytes.Equal(p, data[5:25]) {
		t.Fatalf("ReadInto(5, 20) = %d, %v: %q", n, err, p)
	}
	cs.reset()
	_, _, err = f.ReadInto(a.Ino, 0, 1<<20, func(*Attr, int) ([]byte, error) { return nil, syscall.EACCES })
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("buf's error: %v", err)
	}
	if txns, points := cs.txns.Load(), cs.points.Load(); txns != 1 || points != 1 {
		t.Fatalf("ReadInto refused by buf: %d transactions, %d point reads; want 1, 1 (the inode)", txns, points)
	}
	if _, _, err := f.ReadInto(RootIno, 0, 10, func(*Attr, int) ([]byte, error) { return nil, nil }); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("ReadInto of a directory: %v", err)
	}
	if _, _, err := f.ReadInto(a.Ino, 0, 10, func(*Attr, int) ([]byte, error) { return nil, nil }); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ReadInto into a short buffer: %v", err)
	}
}

// TestReadBlobBuffersReused checks that READs through a block cache read
// the cached blobs into reused buffers: a 1 MiB READ of 32 blocks does
// not allocate their 1 MiB again each time.
func TestReadBlobBuffersReused(t *testing.T) {
	cache, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	_, f := newTestTree(t, kvtest.NewStore(t), Options{Blobs: cache})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>15)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, len(data))
	read := func() {
		if n, _, err := f.ReadAt(a.Ino, p, 0); err != nil || n != len(p) || !bytes.Equal(p, data) {
			t.Fatalf("ReadAt: %d, %v", n, err)
		}
	}
	read()
	const reads = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		read()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > 256<<10 {
		t.Fatalf("a 1 MiB READ through the block cache allocates %d bytes; want under 256 KiB (its blobs read into reused buffers)", per)
	}
	if st := cache.Stats(); st.Misses != 0 {
		t.Fatalf("cache misses: %+v", st)
	}
}

package cowfs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
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
	// The inode's record was read and cached by the READs above: nothing
	// but the transaction.
	if txns, points := cs.txns.Load(), cs.points.Load(); txns != 1 || points != 0 {
		t.Fatalf("ReadInto refused by buf: %d transactions, %d point reads; want 1, 0", txns, points)
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

// TestReadBlobsIntoReply: a READ through a blob store reads each whole
// block whose blob no other block of the READ uses straight into the
// reply (prefetch reports it filled), and every READ, aligned or not,
// reads the file's bytes: blocks sharing a blob, a hole, and a short last
// block included.
func TestReadBlobsIntoReply(t *testing.T) {
	const bs = 4096
	cache, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	_, f := newTestTree(t, kvtest.NewStore(t), Options{Blobs: cache, BlockSize: bs, InlineMax: 64})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	want := randBytes(r, 15*bs+bs/2)
	copy(want[5*bs:6*bs], want[2*bs:3*bs]) // blocks 2 and 5: one blob
	clear(want[9*bs : 10*bs])              // block 9: a hole
	if _, err := f.WriteAt(a.Ino, want[:9*bs], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, want[10*bs:], 10*bs); err != nil {
		t.Fatal(err)
	}
	// Which blocks a READ of the whole file fills in place: the whole
	// blocks of blobs of their own (not 2 and 5, not the hole, not the
	// short last block).
	err = f.view(func(tx kv.Txn, s state) error {
		br, err := f.newBlockReader(tx, s, a.Ino)
		if err != nil {
			return err
		}
		defer br.releaseFetched()
		blocks, err := br.blockRange(0, 15)
		if err != nil {
			return err
		}
		p := make([]byte, len(want))
		filled, err := br.prefetch(blocks, 0, p, 0)
		if err != nil {
			return err
		}
		var got []int
		for i, ok := range filled {
			if ok {
				got = append(got, i)
				if !bytes.Equal(p[i*bs:(i+1)*bs], want[i*bs:(i+1)*bs]) {
					t.Errorf("block %d filled in place reads other bytes", i)
				}
			}
		}
		if fmt.Sprint(got) != "[0 1 3 4 6 7 8 10 11 12 13 14]" {
			t.Errorf("blocks filled in place: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rd := range []struct{ off, n int }{
		{0, len(want)}, {100, 10 * bs}, {bs, 3 * bs}, {2*bs + 1, 5 * bs}, {8 * bs, 8 * bs}, {14 * bs, 2 * bs},
	} {
		p := bytes.Repeat([]byte{0xee}, rd.n)
		n, _, err := f.ReadAt(a.Ino, p, int64(rd.off))
		end := min(rd.off+rd.n, len(want))
		if err != nil || n != end-rd.off || !bytes.Equal(p[:n], want[rd.off:end]) {
			t.Errorf("READ of %d at %d: %d bytes, %v, equal %v", rd.n, rd.off, n, err, bytes.Equal(p[:n], want[rd.off:end]))
		}
	}
}

package kv

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// splitAt cuts b into buffers of the given lengths (the rest in a last one).
func splitAt(b []byte, lens ...int) [][]byte {
	var iov [][]byte
	for _, l := range lens {
		iov = append(iov, b[:l])
		b = b[l:]
	}
	return append(iov, b)
}

// TestReadvCached reads a file in the page cache without waiting, and
// after its pages are dropped reads nothing that way while readv still
// reads it all.
func TestReadvCached(t *testing.T) {
	want := make([]byte, 300<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "000001.vlog")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const off = 4097
	got := make([]byte, len(want)-off)
	iov := splitAt(got, 10, 0, 65536, 3)
	if n := readvCached(int(f.Fd()), iov, off); n != len(got) {
		t.Fatalf("readvCached of cached pages read %d bytes, want %d (noWaitOff %v)", n, len(got), noWaitOff.Load())
	}
	if !bytes.Equal(got, want[off:]) {
		t.Fatal("readvCached read other bytes than the file's")
	}

	// Drop the file's pages: a read without waiting reads none of them.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	clear(got)
	if n := readvCached(int(f.Fd()), iov, off); n == len(got) {
		t.Fatalf("readvCached read all %d bytes of a file out of the page cache", n)
	}
	if noWaitOff.Load() {
		t.Fatal("readvCached turned itself off on a file out of the page cache")
	}
	clear(got)
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if err := readv(f, iov, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want[off:]) {
		t.Fatal("readv of a file out of the page cache read other bytes than the file's")
	}

	// Past the end: a short read is an error.
	if err := readv(f, [][]byte{make([]byte, 10)}, int64(len(want)-5)); err == nil {
		t.Fatal("readv past the end of the file: no error")
	}
}

func TestSkipBytes(t *testing.T) {
	b := []byte("abcdefghij")
	for _, n := range []int{0, 1, 3, 4, 7, 9, 10} {
		iov := splitAt(b, 3, 0, 4)
		orig := slices.Clone(iov)
		rest := skipBytes(iov, n)
		if got := bytes.Join(rest, nil); !bytes.Equal(got, b[n:]) {
			t.Errorf("skipBytes(%d) = %q, want %q", n, got, b[n:])
		}
		for i := range iov {
			if !bytes.Equal(iov[i], orig[i]) {
				t.Errorf("skipBytes(%d) changed the caller's buffer %d", n, i)
			}
		}
	}
}

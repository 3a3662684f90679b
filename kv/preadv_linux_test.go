package kv

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPreadvNotCached: preadv reads a file's bytes whether the page cache
// holds all of them, none (dropped with fadvise), or part, into buffers
// that split the range anywhere.
func TestPreadvNotCached(t *testing.T) {
	data := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{7}).Read(data)
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		evict   func() error
		dropped bool
	}{
		{"cached", func() error { return nil }, false},
		{"dropped", func() error { return unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) }, true},
		{"second half dropped", func() error {
			if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
				return err
			}
			if _, err := unix.Pread(fd, make([]byte, 512<<10), 0); err != nil {
				return err
			}
			// Again past the first half: readahead may have read on.
			return unix.Fadvise(fd, 512<<10, 0, unix.FADV_DONTNEED)
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.evict(); err != nil {
				t.Fatal(err)
			}
			before := notCached.Load()
			const off = 4096 + 10
			a, b, d := make([]byte, 100), make([]byte, 600<<10), make([]byte, 4)
			n, err := preadv(fd, [][]byte{a, nil, b, d}, off)
			if err != nil || n != len(a)+len(b)+len(d) {
				t.Fatalf("read %d bytes, %v; want %d", n, err, len(a)+len(b)+len(d))
			}
			got := append(append(append([]byte(nil), a...), b...), d...)
			if !bytes.Equal(got, data[off:off+len(got)]) {
				t.Fatal("read the wrong bytes")
			}
			// The file system of the test's temporary directory may keep
			// every page (tmpfs): then nothing was out of the cache.
			if c.dropped && notCached.Load() == before && !isTmpfs(t, p) {
				t.Error("no read found bytes out of the page cache after they were dropped: the plain preadv path is untested")
			}
		})
	}
	if noWaitOff.Load() {
		t.Error("preadv2 with RWF_NOWAIT was refused on this kernel; the raw path is untested")
	}
}

func isTmpfs(t *testing.T, p string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC
}

func TestConsumeIov(t *testing.T) {
	iov := [][]byte{make([]byte, 3), make([]byte, 5), make([]byte, 2)}
	for _, c := range []struct{ n, bufs, first int }{
		{0, 3, 3}, {2, 3, 1}, {3, 2, 5}, {4, 2, 4}, {8, 1, 2}, {9, 1, 1}, {10, 0, 0},
	} {
		rest := consumeIov(iov, c.n)
		first := 0
		if len(rest) > 0 {
			first = len(rest[0])
		}
		if len(rest) != c.bufs || first != c.first {
			t.Errorf("after %d bytes: %d buffers, the first of %d; want %d and %d", c.n, len(rest), first, c.bufs, c.first)
		}
		if len(iov[0]) != 3 {
			t.Fatal("consumeIov changed its argument")
		}
	}
}

package nfsserver

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
)

// TestReadSplit checks that a READ read in parts returns what one read
// returns: the same bytes, count and end of file, for reads that end
// inside the file, at its end, past it, and in a part before the last.
func TestReadSplit(t *testing.T) {
	m := newManager(t, "")
	v, _, err := m.View("main")
	if err != nil {
		t.Fatal(err)
	}
	const size = 3<<20 + 12345
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*31 + i>>13)
	}
	a, err := v.Create(cowfs.RootIno, "f", cowfs.CreateUnchecked, newAttrForTest(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, count int }{
		{0, maxIO}, {0, 300 << 10}, {12345, maxIO}, {size - maxIO, maxIO},
		{size - 600<<10, maxIO}, {size - 100, maxIO}, {size, maxIO}, {size + 7, maxIO},
		{1 << 20, 512 << 10}, {5, 256<<10 + 1},
	} {
		for _, workers := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("off=%d/count=%d/workers=%d", c.off, c.count, workers), func(t *testing.T) {
				want := make([]byte, c.count)
				wn, weof, werr := v.ReadAt(a.Ino, want, int64(c.off))
				got := make([]byte, c.count)
				n, eof, err := readSplit(v, a.Ino, got, int64(c.off), workers)
				if n != wn || eof != weof || (err == nil) != (werr == nil) {
					t.Fatalf("readSplit = %d, %v, %v; ReadAt = %d, %v, %v", n, eof, err, wn, weof, werr)
				}
				if !bytes.Equal(got[:n], want[:wn]) {
					t.Fatalf("bytes differ")
				}
				if end := c.off + n; n > 0 && !bytes.Equal(got[:n], data[c.off:end]) {
					t.Fatalf("bytes differ from the file")
				}
			})
		}
	}
}

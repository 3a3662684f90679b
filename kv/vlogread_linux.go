package kv

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readEntry reads the header and key bytes of the entry at off into h and
// the value's first len(dst) bytes into dst, in one preadv.
func readEntry(f *os.File, off int64, h, dst []byte) error {
	return readv(f, [][]byte{h, dst}, off)
}

// readv fills the buffers of iov from the file's bytes at off on, in one
// preadv.
func readv(f *os.File, iov [][]byte, off int64) error {
	want := 0
	for _, b := range iov {
		want += len(b)
	}
	n, err := unix.Preadv(int(f.Fd()), iov, off)
	if err != nil {
		return err
	}
	if n < want {
		return io.ErrUnexpectedEOF
	}
	return nil
}

package kv

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readEntry reads the header and key bytes of the entry at off into h and
// the value's first len(dst) bytes into dst, in one preadv.
func readEntry(f *os.File, off int64, h, dst []byte) error {
	n, err := unix.Preadv(int(f.Fd()), [][]byte{h, dst}, off)
	if err != nil {
		return err
	}
	if n < len(h)+len(dst) {
		return io.ErrUnexpectedEOF
	}
	return nil
}

package kv

import "os"

// readEntry reads the header and key bytes of the entry at off into h and
// the value's first len(dst) bytes into dst.
func readEntry(f *os.File, off int64, h, dst []byte) error {
	return readv(f, [][]byte{h, dst}, off)
}

// readv fills the buffers of iov from the file's bytes at off on, one
// pread each.
func readv(f *os.File, iov [][]byte, off int64) error {
	for _, b := range iov {
		if _, err := f.ReadAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

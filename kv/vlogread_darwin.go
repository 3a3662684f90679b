package kv

import "os"

// readEntry reads the header and key bytes of the entry at off into h and
// the value's first len(dst) bytes into dst.
func readEntry(f *os.File, off int64, h, dst []byte) error {
	if _, err := f.ReadAt(h, off); err != nil {
		return err
	}
	_, err := f.ReadAt(dst, off+int64(len(h)))
	return err
}

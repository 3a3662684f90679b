//go:build linux || darwin

package blobs

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// readCached reads the first size bytes of f into buf if it fits (a new
// slice otherwise) with one pread, then reports who f is now (fstat: the
// identity is read after the bytes, so a write that lands during the read
// changes it). A file shorter than size is io.ErrUnexpectedEOF; bytes past
// size are not read (the caller compares the identity's size with size).
func readCached(f *os.File, size int64, buf []byte) (data []byte, id fileID, nlink uint64, err error) {
	if int64(cap(buf)) >= size {
		buf = buf[:size]
	} else {
		buf = make([]byte, size)
	}
	if _, err := f.ReadAt(buf, 0); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fileID{}, 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return nil, fileID{}, 0, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fileID{}, 0, errors.New("blobs: fstat gave no syscall.Stat_t")
	}
	id, nlink = statID(st)
	return buf, id, nlink, nil
}

// defaultOpenFiles is half the process's limit on open files
// (RLIMIT_NOFILE, which the Go runtime raises to its hard limit at
// start), at most maxDefaultOpenFiles: the rest stays for connections
// and the store.
func defaultOpenFiles() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int(min(rl.Cur/2, maxDefaultOpenFiles))
}

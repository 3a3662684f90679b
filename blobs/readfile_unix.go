//go:build linux || darwin

package blobs

import (
	"io"
	"io/fs"
	"syscall"
)

// readCached reads the first size bytes of the file at p, into buf if it
// fits (a new slice otherwise), with three
// system calls (open, read, close): os.ReadFile adds two fstats (one to
// learn that the file cannot be polled, one for its size) and a read that
// finds the end. A file shorter than size is io.ErrUnexpectedEOF; bytes
// past size are not read (the caller checks what it read against its
// key).
func readCached(p string, size int64, buf []byte) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer syscall.Close(fd)
	if int64(cap(buf)) >= size {
		buf = buf[:size]
	} else {
		buf = make([]byte, size)
	}
	for n := 0; n < len(buf); {
		m, err := syscall.Read(fd, buf[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: p, Err: err}
		case m == 0:
			return nil, io.ErrUnexpectedEOF
		}
		n += m
	}
	return buf, nil
}

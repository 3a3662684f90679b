package kv

import "golang.org/x/sys/unix"

// preadv reads into the buffers of iov from fd's bytes at off on and
// returns how many it read.
func preadv(fd int, iov [][]byte, off int64) (int, error) {
	return unix.Preadv(fd, iov, off)
}

package kv

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// notCached counts the reads that found part of their bytes out of the
// page cache (tests).
var notCached atomic.Int64

// noWaitOff is set once a preadv2 with RWF_NOWAIT is refused (a kernel or
// file system without it): plain preadv from then on.
var noWaitOff atomic.Bool

// preadv reads into the buffers of iov from fd's bytes at off on and
// returns how many it read.
//
// It first reads what the page cache holds with preadv2(RWF_NOWAIT), as a
// raw system call: a value read back soon after it was written, or read
// again, is a copy out of the page cache of some tens of microseconds per
// 512 KiB, and a plain (not raw) system call that long lets the runtime's
// monitor hand the thread's processor to another thread, after which this
// one waits for a processor on its way back (see nfsserver's
// writeRecords). What the page cache lacks (a disk read, which may block
// for long) is read with a plain preadv.
func preadv(fd int, iov [][]byte, off int64) (int, error) {
	if !noWaitOff.Load() {
		v := make([]unix.Iovec, 0, len(iov))
		for _, b := range iov {
			if len(b) > 0 {
				v = append(v, unix.Iovec{Base: &b[0], Len: uint64(len(b))})
			}
		}
		if len(v) == 0 {
			return 0, nil
		}
		n, _, errno := unix.RawSyscall6(unix.SYS_PREADV2, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)), uintptr(off), 0, unix.RWF_NOWAIT)
		switch errno {
		case 0:
			if n == 0 {
				return 0, nil // end of file
			}
			read := int(n)
			rest := consumeIov(iov, read)
			if len(rest) == 0 {
				return read, nil
			}
			notCached.Add(1)
			m, err := unix.Preadv(fd, rest, off+int64(read))
			return read + m, err
		case unix.EAGAIN:
			notCached.Add(1)
		case unix.EINTR:
		case unix.EOPNOTSUPP, unix.EINVAL, unix.ENOSYS:
			noWaitOff.Store(true)
		default:
			return 0, errno
		}
	}
	return unix.Preadv(fd, iov, off)
}

// consumeIov returns what of iov is left after its first n bytes (the
// first buffer left may be a tail of one of iov's).
func consumeIov(iov [][]byte, n int) [][]byte {
	for len(iov) > 0 && n >= len(iov[0]) {
		n -= len(iov[0])
		iov = iov[1:]
	}
	if len(iov) > 0 && n > 0 {
		rest := make([][]byte, len(iov))
		copy(rest, iov)
		rest[0] = rest[0][n:]
		return rest
	}
	return iov
}

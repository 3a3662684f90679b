package kv

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noWaitOff is set once preadv2 with RWF_NOWAIT turns out unsupported
// (an old kernel, a file system without it): every read then blocks.
var noWaitOff atomic.Bool

// readvCached reads what it can of iov from the file at off without
// waiting for the disk: a preadv2 with RWF_NOWAIT, which copies what the
// page cache holds and returns EAGAIN or a short count where it would
// have to wait for the disk. It reports how many bytes it read (0 on any
// error: the blocking read that follows reports it).
//
// It is a raw system call, which keeps the thread's processor: a
// preadv of a 1 MiB READ's blocks copies for ~100 µs, long enough for
// the runtime's monitor to hand the processor to another thread (a
// futex wake, a thread switch) each time, and for the reader to wait for
// one on its way back, on every READ. A copy out of the page cache is
// CPU work on this thread either way; a read that must wait for the disk
// is the one a plain system call is for, and RWF_NOWAIT leaves that one
// to it.
func readvCached(fd int, iov [][]byte, off int64) int {
	if noWaitOff.Load() {
		return 0
	}
	var small [128]unix.Iovec
	v := small[:0]
	for _, b := range iov {
		if len(b) > 0 {
			x := unix.Iovec{Base: &b[0]}
			x.SetLen(len(b))
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0
	}
	lo, hi := uintptr(off), uintptr(uint64(off)>>(unsafe.Sizeof(uintptr(0))*8-1)>>1)
	n, _, errno := unix.RawSyscall6(unix.SYS_PREADV2, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)), lo, hi, unix.RWF_NOWAIT)
	switch errno {
	case 0:
		return int(n)
	case unix.EOPNOTSUPP, unix.ENOSYS, unix.EINVAL:
		noWaitOff.Store(true)
	}
	return 0
}

package nfsserver

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxIovecs is the most buffers one writev takes (IOV_MAX on Linux).
const maxIovecs = 1024

// writeRecords writes every byte of bufs to nc, in order.
//
// On a socket it calls writev itself, as a raw system call: the socket is
// non-blocking (Go's netpoller owns it), so writev copies what fits into
// the socket's buffer and returns at once, and when nothing fits the
// goroutine waits for room in the netpoller like any other write. A plain
// (not raw) system call tells the runtime the thread may block: a 1 MiB
// READ reply takes a few hundred microseconds to copy into loopback's
// socket, long enough for the runtime's monitor to hand the thread's
// processor to another thread each time (and to poll every 20 µs while
// that keeps happening), and the writer then waits for a processor on its
// way back. The copy is CPU work on this thread either way, so keeping the
// processor costs the other goroutines nothing they would otherwise get.
// The write deadline set on nc applies as for Write.
func writeRecords(nc net.Conn, bufs [][]byte, iov *[]unix.Iovec) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return writeBuffers(nc, bufs)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return writeBuffers(nc, bufs)
	}
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for len(bufs) > 0 {
			v := (*iov)[:0]
			for _, b := range bufs {
				if len(v) == maxIovecs {
					break
				}
				if len(b) > 0 {
					v = append(v, unix.Iovec{Base: &b[0], Len: uint64(len(b))})
				}
			}
			*iov = v
			if len(v) == 0 {
				bufs = nil
				break
			}
			n, _, errno := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
			switch errno {
			case 0:
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait until the socket has room
			default:
				werr = errno
				return true
			}
			bufs = consume(bufs, int(n))
		}
		return true
	})
	clear(*iov) // drop the pointers into the buffers
	if werr != nil {
		return &net.OpError{Op: "writev", Net: nc.LocalAddr().Network(), Source: nc.LocalAddr(), Addr: nc.RemoteAddr(), Err: werr}
	}
	return err
}

// consume drops the first n bytes written from bufs.
func consume(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][n:]
	}
	return bufs
}

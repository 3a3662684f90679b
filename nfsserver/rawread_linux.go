package nfsserver

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// connReader returns the reader the connection's calls are read from.
//
// On a socket it calls read itself, as a raw system call, for the reason
// writeRecords does: the socket is non-blocking, so read copies what has
// arrived and returns at once, and when nothing has the goroutine waits in
// the netpoller. A plain system call tells the runtime the thread may
// block, and on a server that went idle between two calls, as it does
// under a client that sends one call at a time, that wakes the runtime's
// monitor thread, which then polls every 20 µs for a millisecond or more:
// a wake-up and dozens of sleeps per call, on a machine where the client
// may be short of processors itself. Deadlines set on nc apply as for Read.
func connReader(nc net.Conn) io.Reader {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	return &rawReader{nc: nc, rc: rc}
}

type rawReader struct {
	nc net.Conn
	rc syscall.RawConn
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch errno {
			case 0:
				n = int(m)
				if n == 0 {
					rerr = io.EOF
				}
				return true
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait until something arrives
			default:
				rerr = &net.OpError{Op: "read", Net: r.nc.LocalAddr().Network(), Source: r.nc.LocalAddr(), Addr: r.nc.RemoteAddr(), Err: errno}
				return true
			}
		}
	})
	if err != nil {
		return 0, err // a deadline passed or the connection was closed
	}
	return n, rerr
}

package nfsserver

import (
	"net"
	"strings"

	"golang.org/x/sys/unix"
)

// unpace switches tc's congestion control to reno, which does not pace,
// if it has one that does (bbr and its versions); from is what it had, to
// what it has now ("" if unchanged). Any user may choose reno: the kernel
// always allows it.
func unpace(tc *net.TCPConn) (from, to string, err error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return "", "", err
	}
	cerr := rc.Control(func(fd uintptr) {
		from, err = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if err != nil || !strings.HasPrefix(from, "bbr") {
			return
		}
		if err = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, "reno"); err == nil {
			to = "reno"
		}
	})
	if cerr != nil {
		return from, "", cerr
	}
	return from, to, err
}

package nfsserver

import "net"

// A loopback connection has no network to pace for, and pacing costs it.
//
// BBR, the default congestion control on some Linux hosts, paces a
// socket's sending: without the fq queueing discipline (loopback has
// none), the kernel spaces the socket's packets out with high-resolution
// timers. On loopback that only delays replies and costs CPU on both
// ends: a client reading a 256 MiB
// file with 8 READs of 1 MiB in flight over 4 new connections read
// 2392 MiB/s (median of 30 reads) from this server with bbr, 2818 with
// reno, and 2357 from ganesha with bbr, on a host whose default is bbr
// (docs/benchmarks.md). So the server switches a loopback connection
// that paces to reno, unless Options.KeepPacing. Reno does not pace, and
// any user may choose it (net.ipv4.tcp_allowed_congestion_control always
// lists it); on loopback, where nothing is lost, it grows its window as
// cubic does.

// unpaceLoopback switches nc's congestion control if nc is a loopback TCP
// connection whose congestion control paces. Failures change nothing
// and are logged at debug level: the connection works either way.
func (s *Server) unpaceLoopback(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	if ra, ok := tc.RemoteAddr().(*net.TCPAddr); !ok || !ra.IP.IsLoopback() {
		return
	}
	from, to, err := unpace(tc)
	switch {
	case err != nil:
		s.log.Debug("nfs: could not change a loopback connection's congestion control", "remote", tc.RemoteAddr(), "from", from, "err", err)
	case to != "":
		s.metrics.unpaced.Add(1)
	}
}

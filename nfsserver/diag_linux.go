package nfsserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerSocket is what the kernel says of a connection's client socket.
type peerSocket struct {
	uid   uint32
	state uint8  // TCP state, as in linux/tcp_states.h (1: ESTABLISHED)
	inode uint64 // of the socket's file; 0 once no process holds it
}

// tcpEstablished is TCP_ESTABLISHED of linux/tcp_states.h.
const tcpEstablished = 1

// owned reports whether the socket's uid names who holds it: a socket
// that is still connected and still a file. A socket closed by its
// process (FIN_WAIT2 or TIME_WAIT, kept by the kernel alone) is reported
// with uid 0 and inode 0, whoever opened it.
func (p peerSocket) owned() bool { return p.state == tcpEstablished && p.inode != 0 }

// diagUID asks the kernel (NETLINK_SOCK_DIAG, the interface of ss(8)) for
// the one TCP socket bound to peer and connected to server, and returns
// its owner, state and inode; ok is false when no such socket exists here. The kernel finds
// it by a hash lookup, as for an arriving packet, so the answer costs
// microseconds whatever the number of sockets. Any user may ask. An error
// means the kernel could not answer (no sock_diag, or a sandbox that
// refuses netlink); the caller then falls back to /proc.
//
// An IPv4 peer is looked for as an IPv4 socket and then as an IPv6 one
// connected to an IPv4-mapped address, as /proc/net/tcp6 would list it.
func diagUID(peer, server *net.TCPAddr) (ps peerSocket, ok bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return ps, false, err
	}
	defer unix.Close(fd)
	// A kernel that never answers must not hold the connection's accept.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return ps, false, err
	}
	type query struct {
		family   uint8
		src, dst net.IP
	}
	var qs []query
	if p4, s4 := peer.IP.To4(), server.IP.To4(); p4 != nil && s4 != nil {
		qs = append(qs, query{unix.AF_INET, p4, s4})
	}
	qs = append(qs, query{unix.AF_INET6, peer.IP.To16(), server.IP.To16()})
	for i, q := range qs {
		if q.src == nil || q.dst == nil {
			continue
		}
		ps, ok, err := diagQuery(fd, uint32(i+1), q.family, q.src, peer.Port, q.dst, server.Port)
		if err != nil || ok {
			return ps, ok, err
		}
	}
	return ps, false, nil
}

// Sizes and offsets of linux/inet_diag.h's structures.
const (
	diagSockIDLen = 48                     // struct inet_diag_sockid
	diagReqLen    = 8 + diagSockIDLen      // struct inet_diag_req_v2
	diagMsgStAt   = 1                      // idiag_state in struct inet_diag_msg
	diagMsgUIDAt  = 4 + diagSockIDLen + 12 // idiag_uid
	diagMsgInoAt  = diagMsgUIDAt + 4       // idiag_inode
)

// diagQuery sends one exact-match SOCK_DIAG_BY_FAMILY request and reads
// its answer.
func diagQuery(fd int, seq uint32, family uint8, src net.IP, sport int, dst net.IP, dport int) (ps peerSocket, ok bool, err error) {
	req := make([]byte, unix.SizeofNlMsghdr+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], seq)
	r := req[unix.SizeofNlMsghdr:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(sport))
	binary.BigEndian.PutUint16(id[2:], uint16(dport))
	if family == unix.AF_INET {
		copy(id[4:], src.To4())
		copy(id[20:], dst.To4())
	} else {
		copy(id[4:], src.To16())
		copy(id[20:], dst.To16())
	}
	// idiag_if 0 (any), cookie INET_DIAG_NOCOOKIE: match by address only.
	ne.PutUint32(id[40:], 0xffffffff)
	ne.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return ps, false, err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return ps, false, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return ps, false, err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // a late answer to an earlier query
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return ps, false, errors.New("sock_diag: short error message")
				}
				switch errno := -int32(ne.Uint32(m.Data)); syscall.Errno(errno) {
				case 0:
					continue
				case unix.ENOENT:
					return ps, false, nil
				default:
					return ps, false, fmt.Errorf("sock_diag: %w", syscall.Errno(errno))
				}
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(m.Data) < diagMsgInoAt+4 {
					return ps, false, errors.New("sock_diag: short answer")
				}
				ps.state = m.Data[diagMsgStAt]
				ps.uid = ne.Uint32(m.Data[diagMsgUIDAt:])
				ps.inode = uint64(ne.Uint32(m.Data[diagMsgInoAt:]))
				return ps, true, nil
			}
		}
	}
}

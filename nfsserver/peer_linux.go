package nfsserver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// checkPeer decides whether a TCP connection from remote to local may be
// served: a privileged source port (below ip_unprivileged_port_start,
// which only root can bind: the kernel NFS client) always may; otherwise
// the peer socket must be on this machine, still connected and held by a
// process (peerSocket.owned), and belong to one of allow. A socket whose
// owner cannot be told (gone, closed, not found) is refused, never taken
// for root's. The error says why not.
func checkPeer(local, remote *net.TCPAddr, allow []uint32) error {
	if remote.Port < unprivilegedPortStart() {
		return nil
	}
	uid, err := socketUID(remote, local)
	if err != nil {
		return err
	}
	if !slices.Contains(allow, uid) {
		return fmt.Errorf("the peer's socket belongs to uid %d; only uids %v may connect (run the client as the store's owner, or mount with the kernel's NFS client)", uid, allow)
	}
	return nil
}

// unprivilegedPortStart is the lowest port an unprivileged process may
// bind (1024 unless the administrator changed it).
func unprivilegedPortStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 1024
	}
	return n
}

// socketUID finds the owner of the client's end of a connection, the TCP
// socket bound to peer and connected to server: by asking the kernel for
// that one socket (sock_diag), or where the kernel cannot answer that, in
// /proc/net/tcp and /proc/net/tcp6. A socket that is no longer connected
// and held by a process has no owner to tell: the kernel keeps a closed
// socket (FIN_WAIT2, TIME_WAIT) under uid 0, so a client that sends its
// calls and closes at once would otherwise pass for root.
func socketUID(peer, server *net.TCPAddr) (uint32, error) {
	ps, ok, err := diagUID(peer, server)
	if err != nil {
		ps, ok, err = procSocket(peer, server)
		if err != nil {
			return 0, err
		}
	}
	if !ok {
		return 0, errNotLocal(peer)
	}
	if !ps.owned() {
		return 0, fmt.Errorf("peer %s closed its socket before its owner could be checked (TCP state %d, inode %d): refused", peer, ps.state, ps.inode)
	}
	return ps.uid, nil
}

func errNotLocal(peer *net.TCPAddr) error {
	return fmt.Errorf("peer %s is not a socket of this machine (or of this network namespace) and its port is unprivileged", peer)
}

// procUID is socketUID by a scan of /proc/net/tcp and /proc/net/tcp6
// alone.
func procUID(peer, server *net.TCPAddr) (uint32, error) {
	ps, ok, err := procSocket(peer, server)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errNotLocal(peer)
	}
	if !ps.owned() {
		return 0, fmt.Errorf("peer %s closed its socket (TCP state %d, inode %d)", peer, ps.state, ps.inode)
	}
	return ps.uid, nil
}

// procSocket is diagUID by a scan of /proc/net/tcp and /proc/net/tcp6. The
// kernel writes those files out by walking its whole table of connected
// sockets, a millisecond or two on a machine with much memory whatever
// the number of sockets: a client that opens a connection per file paid
// for it on every file.
func procSocket(peer, server *net.TCPAddr) (peerSocket, bool, error) {
	var keys [][2]string
	if ip4 := peer.IP.To4(); ip4 != nil && server.IP.To4() != nil {
		keys = append(keys, [2]string{procAddr(ip4, peer.Port), procAddr(server.IP.To4(), server.Port)})
	}
	keys = append(keys, [2]string{procAddr(peer.IP.To16(), peer.Port), procAddr(server.IP.To16(), server.Port)})
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ps, ok, err := findSocket(table, keys)
		if err != nil || ok {
			return ps, ok, err
		}
	}
	return peerSocket{}, false, nil
}

// procAddr formats an address as /proc/net/tcp does: each 32-bit word of
// the address in host byte order, then the port, in upper-case hex.
func procAddr(ip net.IP, port int) string {
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", port)
	return b.String()
}

// findSocket scans one /proc/net table for a socket with one of keys as
// (local, remote) and returns its uid, state and inode.
func findSocket(table string, keys [][2]string) (ps peerSocket, ok bool, err error) {
	f, err := os.Open(table)
	if os.IsNotExist(err) {
		return ps, false, nil // no IPv6
	}
	if err != nil {
		return ps, false, fmt.Errorf("cannot check the peer's uid: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 10 {
			continue
		}
		for _, k := range keys {
			if string(fields[1]) == k[0] && string(fields[2]) == k[1] {
				uid, err1 := strconv.ParseUint(string(fields[7]), 10, 32)
				st, err2 := strconv.ParseUint(string(fields[3]), 16, 8)
				ino, err3 := strconv.ParseUint(string(fields[9]), 10, 64)
				if err1 != nil || err2 != nil || err3 != nil {
					return ps, false, fmt.Errorf("cannot check the peer's uid: bad line in %s: %q", table, sc.Text())
				}
				return peerSocket{uid: uint32(uid), state: uint8(st), inode: ino}, true, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return ps, false, fmt.Errorf("cannot check the peer's uid: %w", err)
	}
	return ps, false, nil
}

package nfsserver

import "net"

// checkPeer accepts every connection: macOS cannot tell which user owns
// the other end of a TCP connection, and its NFS client connects from
// unprivileged ports (README, "Guarantees").
func checkPeer(local, remote *net.TCPAddr, allow []uint32) error { return nil }

package nfsserver

import (
	"io"
	"net"
)

// connReader returns the reader the connection's calls are read from: the
// connection itself, read through the runtime's netpoller.
func connReader(nc net.Conn) io.Reader { return nc }

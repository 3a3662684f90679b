package control

import (
	"context"
	"net"
	"sync"
)

// pipeListener is a net.Listener of in-process connections (net.Pipe):
// Server.LocalClient reaches the server through it, without a socket.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

var _ net.Listener = (*pipeListener)(nil)

// dial returns the client end of a new connection.
func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
	case <-ctx.Done():
		c.Close()
		s.Close()
		return nil, ctx.Err()
	}
	c.Close()
	s.Close()
	return nil, net.ErrClosed
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-process" }

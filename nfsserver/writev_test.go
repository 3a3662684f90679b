package nfsserver

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWriteRecords writes more buffers than one writev takes, some empty,
// through a socket buffer far smaller than them (so writes are partial and
// wait for room), and reads every byte back in order.
func TestWriteRecords(t *testing.T) {
	srv, cli := tcpPair(t)
	srv.(*net.TCPConn).SetWriteBuffer(16 << 10)
	cli.(*net.TCPConn).SetReadBuffer(16 << 10)
	var bufs [][]byte
	var want []byte
	for i := range 3000 {
		b := make([]byte, (i*37)%2000)
		for j := range b {
			b[j] = byte(i + j*7)
		}
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(cli)
		got <- b
	}()
	var iov []unix.Iovec
	if err := writeRecords(srv, bufs, &iov); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("read back %d bytes, want %d (equal: %v)", len(b), len(want), bytes.Equal(b, want))
	}
	for _, v := range iov {
		if v.Base != nil {
			t.Fatal("the iovecs still point into the written buffers")
		}
	}
}

// TestWriteRecordsDeadline: a peer that reads nothing makes the write fail
// at the write deadline instead of blocking.
func TestWriteRecordsDeadline(t *testing.T) {
	srv, _ := tcpPair(t)
	srv.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	var iov []unix.Iovec
	err := writeRecords(srv, [][]byte{make([]byte, 64<<20)}, &iov)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that reads nothing: %v, want a deadline error", err)
	}
}

// TestWriteRecordsClosed: a write to a connection the peer reset fails.
func TestWriteRecordsClosed(t *testing.T) {
	srv, cli := tcpPair(t)
	cli.(*net.TCPConn).SetLinger(0)
	cli.Close()
	var iov []unix.Iovec
	var err error
	for range 100 { // the reset may take a moment to arrive
		if err = writeRecords(srv, [][]byte{make([]byte, 1<<20)}, &iov); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a reset connection succeed")
	}
}

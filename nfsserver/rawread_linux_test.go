package nfsserver

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestConnReader reads a TCP connection through the raw reader: bytes
// arrive whole and in order across writes, a read deadline ends a read
// that waits with a timeout error, and the peer's close reads as io.EOF.
func TestConnReader(t *testing.T) {
	nc, peer := tcpPair(t)
	r := connReader(nc)
	if _, ok := r.(*rawReader); !ok {
		t.Fatalf("connReader of a TCP connection is %T, want *rawReader", r)
	}

	want := make([]byte, 3<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	go func() {
		for off := 0; off < len(want); off += 100_000 {
			peer.Write(want[off:min(off+100_000, len(want))])
		}
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("byte %d is %d, want %d", i, got[i], want[i])
		}
	}

	nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := r.Read(got)
	if n != 0 || !isTimeout(err) {
		t.Fatalf("read past the deadline: %d bytes, err %v; want a timeout", n, err)
	}
	nc.SetReadDeadline(time.Time{})

	peer.Write([]byte("end"))
	peer.Close()
	all, err := io.ReadAll(r)
	if err != nil || string(all) != "end" {
		t.Fatalf("after the peer's close: %q, %v; want \"end\" then EOF", all, err)
	}
	if n, err := r.Read(got); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read after EOF: %d, %v", n, err)
	}

	nc.Close()
	if _, err := r.Read(got); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed connection: %v, want net.ErrClosed", err)
	}
}

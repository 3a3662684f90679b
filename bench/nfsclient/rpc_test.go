package nfsclient

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// fakeReplies serves one connection: for each call it reads, it writes what
// answer returns for the call's XID, as is (record marks included).
func fakeReplies(t *testing.T, answer func(xid uint32) []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			var m [4]byte
			if _, err := io.ReadFull(br, m[:]); err != nil {
				return
			}
			rec := make([]byte, binary.BigEndian.Uint32(m[:])&0x7fffffff)
			if _, err := io.ReadFull(br, rec); err != nil {
				return
			}
			out := answer(binary.BigEndian.Uint32(rec))
			if out == nil {
				return // hang up
			}
			c.Write(out)
		}
	}()
	return ln.Addr().String()
}

// fragments splits a record into record-marked fragments of at most n bytes.
func fragments(rec []byte, n int) []byte {
	var out []byte
	for len(rec) > 0 {
		k := min(n, len(rec))
		mark := uint32(k)
		if k == len(rec) {
			mark |= 0x80000000
		}
		out = binary.BigEndian.AppendUint32(out, mark)
		out = append(out, rec[:k]...)
		rec = rec[k:]
	}
	return out
}

func u32s(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// acceptedReply is the header of a successful reply to xid.
func acceptedReply(xid uint32) []byte { return u32s(xid, 1, 0, 0, 0, 0) }

// TestTransportRead: a READ reply split into fragments, after a reply to a
// call nobody made, lands in the caller's buffer; an error status comes
// back as a StatusError; a connection that closes fails the call waiting.
func TestTransportRead(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	addr := fakeReplies(t, func(xid uint32) []byte {
		switch xid % 3 {
		case 0: // READ: status, attributes, count, eof, data
			rec := append(acceptedReply(xid), u32s(0, 1)...)
			rec = append(rec, make([]byte, fattr3Size)...)
			rec = append(rec, u32s(uint32(len(data)), 1, uint32(len(data)))...)
			rec = append(rec, data...)
			stray := fragments(append(acceptedReply(xid+1000), u32s(0)...), 1<<20)
			return append(stray, fragments(rec, 777)...)
		case 1: // NFS3ERR_ACCES, no attributes
			return fragments(append(acceptedReply(xid), u32s(13, 0)...), 1<<20)
		}
		return nil
	})
	tr, err := dialTransport(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &Conn{c: tr}
	tr.xid.Store(2) // READs 3 (data), 4 (error) and 5 (hang up)
	for i := 0; i < 3; i++ {
		next := tr.xid.Load() + 1
		p := make([]byte, len(data)+100)
		n, eof, err := c.Read([]byte("fh"), 0, p)
		switch next % 3 {
		case 0:
			if err != nil || n != len(data) || !eof || !bytes.Equal(p[:n], data) {
				t.Fatalf("READ: n %d eof %v err %v, data right: %v", n, eof, err, bytes.Equal(p[:n], data))
			}
		case 1:
			if !IsStatus(err, 13) {
				t.Fatalf("READ answered NFS3ERR_ACCES: %v", err)
			}
		case 2:
			if err == nil {
				t.Fatal("READ answered by a closed connection: no error")
			}
			return
		}
	}
}

package nfsserver

import (
	"encoding/binary"
	"errors"
)

// errGarbage reports arguments that do not decode; the RPC layer answers
// GARBAGE_ARGS.
var errGarbage = errors.New("nfsserver: malformed XDR arguments")

// decoder reads XDR (RFC 4506) from a byte slice holding one whole RPC
// record. It never allocates more than the record holds: a length field that
// claims more bytes than remain fails the decode. The first error sticks;
// later reads return zero values, so callers check err once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errGarbage
	}
	d.b = nil
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// bool decodes an XDR boolean; anything but 0 or 1 is garbage.
func (d *decoder) bool() bool {
	v := d.u32()
	if v > 1 {
		d.fail()
	}
	return v == 1
}

// fixed returns n bytes (plus padding to a multiple of 4 consumed). The
// returned slice aliases the record.
func (d *decoder) fixed(n int) []byte {
	padded := (n + 3) &^ 3
	if n < 0 || len(d.b) < padded {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[padded:]
	return v
}

// opaque decodes variable-length opaque data of at most max bytes. The
// returned slice aliases the record.
func (d *decoder) opaque(max int) []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		d.fail()
		return nil
	}
	return d.fixed(int(n))
}

func (d *decoder) string(max int) string { return string(d.opaque(max)) }

// encoder appends XDR to a byte slice.
type encoder struct {
	b []byte
}

func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

func (e *encoder) bool(v bool) {
	if v {
		e.u32(1)
	} else {
		e.u32(0)
	}
}

var zeroPad [4]byte

// fixed appends p padded to a multiple of 4 bytes.
func (e *encoder) fixed(p []byte) {
	e.b = append(e.b, p...)
	if r := len(p) & 3; r != 0 {
		e.b = append(e.b, zeroPad[:4-r]...)
	}
}

func (e *encoder) opaque(p []byte) {
	e.u32(uint32(len(p)))
	e.fixed(p)
}

func (e *encoder) string(s string) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
	if r := len(s) & 3; r != 0 {
		e.b = append(e.b, zeroPad[:4-r]...)
	}
}

// xdrSize is the encoded size of opaque or string data of n bytes.
func xdrSize(n int) int { return 4 + (n+3)&^3 }

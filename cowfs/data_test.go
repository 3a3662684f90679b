package cowfs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
)

// TestDataAcrossLayers checks reads against a byte-slice model while random
// writes (small ones become patch references), truncates and new layers
// interleave.
func TestDataAcrossLayers(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{BlockSize: 4096, InlineMax: 64})
	a, err := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var model []byte
	for step := 0; step < 600; step++ {
		switch op := r.IntN(10); {
		case op < 6:
			n := 1 + r.IntN(40)
			if r.IntN(4) == 0 {
				n = 1 + r.IntN(12000)
			}
			off := r.IntN(len(model) + 5000)
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(r.IntN(256))
			}
			if _, err := f.WriteAt(a.Ino, p, int64(off)); err != nil {
				t.Fatal(err)
			}
			if off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], p)
		case op < 8:
			size := r.IntN(len(model) + 3000)
			s := uint64(size)
			if _, err := f.SetAttr(a.Ino, SetAttr{Size: &s}); err != nil {
				t.Fatal(err)
			}
			if size < len(model) {
				model = model[:size]
			} else {
				model = append(model, make([]byte, size-len(model))...)
			}
		default:
			top, err := sto.NewLayerOver(ctx, f.Top())
			if err != nil {
				t.Fatal(err)
			}
			if err := f.SetTop(top); err != nil {
				t.Fatal(err)
			}
		}
		// Read into a dirty buffer, as the server's pooled reply buffers
		// are: short blocks, holes and bytes beyond a cut must come back
		// as zeros, not as what the buffer held.
		got := bytes.Repeat([]byte{0xa5}, len(model)+100)
		n, eof, err := f.ReadAt(a.Ino, got, 0)
		if err != nil || !eof || !bytes.Equal(got[:n], model) {
			t.Fatalf("step %d: read %d bytes (eof %v, err %v), model has %d; equal=%v",
				step, n, eof, err, len(model), bytes.Equal(got[:n], model))
		}
		if len(model) > 0 {
			off := r.IntN(len(model))
			part := bytes.Repeat([]byte{0x5a}, 1+r.IntN(len(model)-off))
			n, _, err := f.ReadAt(a.Ino, part, int64(off))
			if err != nil || !bytes.Equal(part[:n], model[off:off+n]) || n != len(part) {
				t.Fatalf("step %d: read of %d bytes at %d: got %d (err %v), differs from the model", step, len(part), off, n, err)
			}
		}
	}
}

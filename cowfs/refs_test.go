package cowfs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
)

// sweepAround runs one block sweep the way branches' reclaimer does, with
// between run after its mark snapshot and before its deletions: content
// unreferenced in the snapshot is deleted unless a write recorded it.
// Every layer counts as live (a stricter sweep deletes only more).
func sweepAround(t *testing.T, s *Store, between func()) {
	t.Helper()
	if runSweep(t, s, between) == 0 {
		t.Fatal("the sweep has no candidate: the test set-up left no unreferenced content")
	}
}

// runSweep is sweepAround that returns how many contents it deleted,
// none included.
func runSweep(t *testing.T, s *Store, between func()) int {
	t.Helper()
	w, err := s.BeginSweep(func(tx *Txn) ([]LayerID, error) {
		var layers []LayerID
		err := eachLayer(tx.tx, true, func(l, _ LayerID) (bool, error) {
			layers = append(layers, l)
			return true, nil
		})
		return layers, err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.End()
	between()
	n, err := w.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func randBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.IntN(255) + 1)
	}
	return p
}

// leaveGarbage stores p as the second block of a file and truncates that
// block away, so p's content is stored and unreferenced.
func leaveGarbage(t *testing.T, f *View, name string, first, p []byte) {
	t.Helper()
	a, err := f.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, append(append([]byte(nil), first...), p...), 0); err != nil {
		t.Fatal(err)
	}
	size := uint64(len(first))
	if _, err := f.SetAttr(a.Ino, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
}

// overGarbage leaves garbage content p (see leaveGarbage) and writes a
// file b of two blocks and a bit whose second block starts with p. It
// returns b and its bytes up to the end of p: truncated there, b's last
// block equals the garbage.
func overGarbage(t *testing.T, f *View, r *rand.Rand) (Attr, []byte) {
	t.Helper()
	bs := f.BlockSize()
	first, p := randBytes(r, bs), randBytes(r, 1000)
	leaveGarbage(t, f, "garbage", first, p)
	b, err := f.Create(RootIno, "b", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(randBytes(r, bs), p...), randBytes(r, bs-len(p))...)
	if _, err := f.WriteAt(b.Ino, want, 0); err != nil {
		t.Fatal(err)
	}
	return b, want[:bs+len(p)]
}

func readAll(t *testing.T, f *View, ino InodeID, n int) []byte {
	t.Helper()
	got := make([]byte, n+10)
	k, _, err := f.ReadAt(ino, got, 0)
	if err != nil {
		t.Fatalf("read after the sweep: %v", err)
	}
	return got[:k]
}

// TestReclaimRaceTruncate: a truncate whose new last block equals content
// the sweep found unreferenced references that content again without
// storing it; the sweep must keep it.
func TestReclaimRaceTruncate(t *testing.T) {
	const bs = 4096
	f, _, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	b, want := overGarbage(t, f, rand.New(rand.NewPCG(1, 2)))
	sweepAround(t, sto, func() {
		size := uint64(len(want))
		if _, err := f.SetAttr(b.Ino, SetAttr{Size: &size}); err != nil {
			t.Fatal(err)
		}
	})
	if got := readAll(t, f, b.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes after the sweep, want %d (equal=%v)", len(got), len(want), bytes.Equal(got, want))
	}
}

// TestReclaimRaceFoldTrim: folding a layer whose record cuts a block of
// the layer below trims that block; the trimmed block may equal content
// the sweep found unreferenced.
func TestReclaimRaceFoldTrim(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, st, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	b, want := overGarbage(t, f, rand.New(rand.NewPCG(3, 4)))
	// Truncate in a layer x over y: x's record cuts y's second block.
	x, y := pushLayer(t, f)
	size := uint64(len(want))
	if _, err := f.SetAttr(b.Ino, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
	sweepAround(t, sto, func() {
		if err := sto.FoldDown(ctx, x, y); err != nil {
			t.Fatal(err)
		}
	})
	folded, err := openStore(t, st, Options{BlockSize: bs, InlineMax: 64, ReadOnly: true}).OpenView(ctx, y)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, folded, b.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes after the sweep, want %d (equal=%v)", len(got), len(want), bytes.Equal(got, want))
	}
}

package cowfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// sweepAround runs one block sweep the way branches' reclaimer does, with
// between run after its mark snapshot and before its deletions: content
// unreferenced in the snapshot is deleted unless a write recorded it.
// Every layer counts as live (a stricter sweep deletes only more).
func sweepAround(t *testing.T, tr *Tracker, st kv.Store, between func()) {
	t.Helper()
	var snap kv.Snapshot
	tr.Begin(func() { snap = st.NewSnapshot() })
	defer tr.End()
	marked := map[string]bool{}
	var layers []LayerID
	err := snap.Iterate([]byte{pfxLayer}, nil, true, func(k, _ []byte) (bool, error) {
		layers = append(layers, LayerID(binary.BigEndian.Uint64(k[1:])))
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if err := ReferencedHashes(snap, l, func(h []byte) { marked[string(h)] = true }); err != nil {
			t.Fatal(err)
		}
	}
	var cands [][]byte
	err = ContentHashes(snap, func(h []byte) bool {
		if !marked[string(h)] {
			cands = append(cands, append([]byte(nil), h...))
		}
		return true
	})
	snap.Discard()
	if err != nil {
		t.Fatal(err)
	}
	if len(cands) == 0 {
		t.Fatal("the sweep has no candidate: the test set-up left no unreferenced content")
	}
	between()
	err = tr.Sweep(func(seen func([]byte) bool) error {
		return st.Update(context.Background(), func(tx kv.Txn) error {
			for _, h := range cands {
				if !seen(h) {
					if err := DeleteContent(tx, h); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
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
	tr := NewTracker()
	f, st, _ := newTestFS(t, Options{BlockSize: bs, InlineMax: 64, Tracker: tr})
	r := rand.New(rand.NewPCG(1, 2))
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
	want = want[:bs+len(p)]
	sweepAround(t, tr, st, func() {
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
	tr := NewTracker()
	opts := Options{BlockSize: bs, InlineMax: 64, Tracker: tr}
	f, st, al := newTestFS(t, opts)
	r := rand.New(rand.NewPCG(3, 4))
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
	want = want[:bs+len(p)]
	// Truncate in a layer x over y: x's record cuts y's second block.
	y := f.Top()
	x, err := NewLayerOver(ctx, st, al, y)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetTop(x); err != nil {
		t.Fatal(err)
	}
	size := uint64(len(want))
	if _, err := f.SetAttr(b.Ino, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
	sweepAround(t, tr, st, func() {
		if err := FoldDown(ctx, f, x, y); err != nil {
			t.Fatal(err)
		}
	})
	folded, err := New(st, al, y, Options{BlockSize: bs, InlineMax: 64, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, folded, b.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes after the sweep, want %d (equal=%v)", len(got), len(want), bytes.Equal(got, want))
	}
}

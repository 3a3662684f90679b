package cowfs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

func countData(t *testing.T, st kv.Store, l LayerID, ino InodeID) int {
	t.Helper()
	n := 0
	err := st.View(context.Background(), func(tx kv.Txn) error {
		n = 0
		return tx.Iterate(dataPrefix(l, ino), nil, true, func(k, _ []byte) (bool, error) { n++; return true, nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPruneShadowed: pruning layer y under x deletes exactly y's blocks
// that x hides (blocks x rewrote, blocks beyond x's Cut, every block of an
// inode x deleted), and every file reads the same before and after, also
// after x writes and truncates again.
func TestPruneShadowed(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, st, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(7, 8))
	fm := newFileModel(t, f)
	models := fm.files
	mk := func(name string, size int) InodeID { return fm.create(name, randBytes(r, size)) }
	rewritten := mk("rewritten", 8*bs)
	shrunk := mk("shrunk", 8*bs)
	deleted := mk("deleted", 8*bs)
	untouched := mk("untouched", 3*bs)
	x, y := pushLayer(t, f)
	write, truncate := fm.write, fm.truncate
	write(rewritten, bs, randBytes(r, 3*bs))  // blocks 1-3 hidden
	write(rewritten, 6*bs+5, randBytes(r, 9)) // a patch of block 6 hides it too
	truncate(shrunk, 2*bs+100)                // blocks 3-7 hidden, 2 straddles
	if err := f.Unlink(RootIno, "deleted"); err != nil {
		t.Fatal(err)
	}
	delete(models, deleted)
	check := func(when string) {
		t.Helper()
		for ino, want := range models {
			got := make([]byte, len(want)+10)
			n, _, err := f.ReadAt(ino, got, 0)
			if err != nil || !bytes.Equal(got[:n], want) {
				t.Fatalf("%s: inode %d reads %d bytes (%v), want %d (equal=%v)", when, ino, n, err, len(want), bytes.Equal(got[:n], want))
			}
		}
	}
	check("before")
	n, err := sto.PruneShadowed(ctx, x, y)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 + 5 + 8; n != want {
		t.Errorf("pruned %d references, want %d", n, want)
	}
	for ino, want := range map[InodeID]int{rewritten: 4, shrunk: 3, deleted: 0, untouched: 3} {
		if got := countData(t, st, y, ino); got != want {
			t.Errorf("inode %d keeps %d blocks in y, want %d", ino, got, want)
		}
	}
	check("after the prune")
	// Growing the files again must not uncover anything.
	truncate(shrunk, 8*bs)
	write(rewritten, 10*bs, []byte("tail"))
	check("after growing")
	if n, err := sto.PruneShadowed(ctx, x, y); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v; want nothing left", n, err)
	}
	check("after a second prune")
}

// fileModel writes files through a view and keeps the bytes each should
// hold.
type fileModel struct {
	t     testing.TB
	f     *View
	files map[InodeID][]byte
}

func newFileModel(t testing.TB, f *View) *fileModel {
	return &fileModel{t: t, f: f, files: map[InodeID][]byte{}}
}

// create makes file name in the root holding p.
func (m *fileModel) create(name string, p []byte) InodeID {
	m.t.Helper()
	a, err := m.f.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		m.t.Fatal(err)
	}
	if _, err := m.f.WriteAt(a.Ino, p, 0); err != nil {
		m.t.Fatal(err)
	}
	m.files[a.Ino] = bytes.Clone(p)
	return a.Ino
}

func (m *fileModel) write(ino InodeID, off int, p []byte) {
	m.t.Helper()
	if _, err := m.f.WriteAt(ino, p, int64(off)); err != nil {
		m.t.Fatal(err)
	}
	b := m.files[ino]
	if off+len(p) > len(b) {
		b = append(b, make([]byte, off+len(p)-len(b))...)
	}
	copy(b[off:], p)
	m.files[ino] = b
}

func (m *fileModel) truncate(ino InodeID, size int) {
	m.t.Helper()
	s := uint64(size)
	if _, err := m.f.SetAttr(ino, SetAttr{Size: &s}); err != nil {
		m.t.Fatal(err)
	}
	b := m.files[ino]
	if size <= len(b) {
		m.files[ino] = b[:size]
	} else {
		m.files[ino] = append(b, make([]byte, size-len(b))...)
	}
}

// TestPruneWithinStoreLimits: pruning the 303 blocks a truncation hides
// in the layer below takes transactions the store takes (etcd's 128
// writes and reads here).
func TestPruneWithinStoreLimits(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), kv.Limits{Writes: 128, Reads: 128, Bytes: 3<<19 - 512, OpBytes: 24})
	sto, f := newTestTree(t, st, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(9, 10))
	fm := newFileModel(t, f)
	big := fm.create("big", nil)
	for off := 0; off < 304*bs; off += 16 * bs { // 16 blocks a transaction
		fm.write(big, off, randBytes(r, 16*bs))
	}
	x, y := pushLayer(t, f)
	fm.truncate(big, 100)
	n, err := sto.PruneShadowed(ctx, x, y)
	if err != nil {
		t.Fatalf("prune on a store of 128 writes and reads per transaction: %v", err)
	}
	if n != 303 {
		t.Errorf("pruned %d references, want 303", n)
	}
	got := make([]byte, 200)
	if k, _, err := f.ReadAt(big, got, 0); err != nil || !bytes.Equal(got[:k], fm.files[big]) {
		t.Errorf("big reads %d bytes (%v) after the prune, want its first 100", k, err)
	}
}

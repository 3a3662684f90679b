package cowfs

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestRemoveWithinStoreLimits removes, and renames a file over, files of
// more blocks than one transaction of etcd's default limits may delete:
// both succeed, and no block reference of either file stays in the layer.
func TestRemoveWithinStoreLimits(t *testing.T) {
	const bs, blocks = 4096, 304
	st := kvtest.Limited(kvtest.NewStore(t), kv.Limits{Writes: 128, Reads: 128, Bytes: 3<<19 - 512, OpBytes: 24})
	_, f := newTestTree(t, st, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(11, 12))
	fm := newFileModel(t, f)
	big := func(name string) InodeID {
		ino := fm.create(name, nil)
		for off := 0; off < blocks*bs; off += 16 * bs { // 16 blocks a transaction
			fm.write(ino, off, randBytes(r, 16*bs))
		}
		return ino
	}
	a, b := big("a"), big("b")
	fm.create("small", []byte("small"))
	top := f.Stack()[0]
	if n := countKeys(t, st, dataPrefix(top, a)); n != blocks {
		t.Fatalf("a has %d block references before the remove, want %d", n, blocks)
	}
	if err := f.Unlink(RootIno, "a"); err != nil {
		t.Fatalf("remove of a file of %d blocks on a store of 128 writes per transaction: %v", blocks, err)
	}
	if err := f.Rename(RootIno, "small", RootIno, "b"); err != nil {
		t.Fatalf("rename over a file of %d blocks on a store of 128 writes per transaction: %v", blocks, err)
	}
	for name, ino := range map[string]InodeID{"a": a, "b": b} {
		if n := countKeys(t, st, dataPrefix(top, ino)); n != 0 {
			t.Errorf("%s: %d block references left in the top layer after its last link went", name, n)
		}
		if _, err := f.GetAttr(ino); err == nil {
			t.Errorf("%s: inode %d still has attributes", name, ino)
		}
	}
	got := make([]byte, 16)
	if ba, err := f.Lookup(RootIno, "b"); err != nil {
		t.Fatal(err)
	} else if k, _, err := f.ReadAt(ba.Ino, got, 0); err != nil || string(got[:k]) != "small" {
		t.Errorf("b reads %q (%v) after the rename, want %q", got[:k], err, "small")
	}
}

func countKeys(t *testing.T, st kv.Store, pfx []byte) int {
	t.Helper()
	n := 0
	err := st.View(context.Background(), func(tx kv.Txn) error {
		return tx.Iterate(pfx, nil, true, func(_, _ []byte) (bool, error) { n++; return true, nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

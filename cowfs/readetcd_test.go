package cowfs

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestReadOneEtcdRequest: a warm 1 MiB READ on etcd, with the content in
// a block cache, costs one etcd request (Range or Txn): the top layer's
// inode record and block references come in one, whether the top holds
// the file's data, part of it, or nothing of it.
func TestReadOneEtcdRequest(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	cache, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	_, f := newTestTree(t, c.NewStore(t, etcdkv.Options{}), Options{Blobs: cache})
	const size = 4 << 20
	data := randBytes(rand.New(rand.NewPCG(1, 2)), size)
	a, err := f.Create(RootIno, "big", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < size; off += 1 << 20 { // as a client's WRITEs
		if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 1<<20)
	read := func(off int) int64 {
		t.Helper()
		before := c.Calls(t, "Range", "Txn")
		n, _, err := f.ReadInto(a.Ino, uint64(off), len(buf), func(_ *Attr, n int) ([]byte, error) { return buf[:n], nil })
		calls := c.Calls(t, "Range", "Txn") - before
		if err != nil || n != len(buf) || !bytes.Equal(buf, data[off:off+n]) {
			t.Fatalf("READ at %d: %d bytes, %v, or not the bytes written", off, n, err)
		}
		return calls
	}
	check := func(what string) {
		t.Helper()
		for _, off := range []int{0, 1 << 20, 3 << 20} {
			read(off) // warm
			if got := read(off); got != 1 {
				t.Errorf("%s: a warm READ at %d cost %d etcd requests, want 1", what, off, got)
			}
		}
	}
	check("the data in the top layer")
	pushLayer(t, f)
	check("the data in a frozen layer, nothing of the file in the top")
	edit := bytes.Repeat([]byte{'x'}, 5000)
	if _, err := f.WriteAt(a.Ino, edit, 1<<20+100); err != nil {
		t.Fatal(err)
	}
	copy(data[1<<20+100:], edit)
	check("an edit in the top layer over a frozen one")
}

package cowfs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestReadOneEtcdRequest: a warm 1 MiB READ on etcd, with the content in
// a block cache, costs no etcd request in a view whose top layer only
// its Store writes (the top-layer cache), and one (Range or Txn) in a
// view of a shared store whose branch this server does not own: the top
// layer's inode record and block references come in one, whether the
// top holds the file's data, part of it, or nothing of it.
func TestReadOneEtcdRequest(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	for _, owned := range []bool{true, false} {
		t.Run(fmt.Sprintf("owned=%v", owned), func(t *testing.T) {
			cache, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cache.Close() })
			st := c.NewStore(t, etcdkv.Options{Prefix: fmt.Sprintf("/owned-%v/", owned)})
			_, f := newTestTree(t, st, Options{Blobs: cache, Shared: true})
			// write writes as the branch's owner; the view then goes back
			// to not owning it, unless owned.
			write := func(fn func()) {
				t.Helper()
				f.SetReadOnly(false)
				fn()
				f.SetReadOnly(!owned)
			}
			want := int64(1)
			if owned {
				want = 0
			}
			const size = 4 << 20
			data := randBytes(rand.New(rand.NewPCG(1, 2)), size)
			var ino InodeID
			write(func() {
				a, err := f.Create(RootIno, "big", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
				if err != nil {
					t.Fatal(err)
				}
				ino = a.Ino
				for off := 0; off < size; off += 1 << 20 { // as a client's WRITEs
					if _, err := f.WriteAt(ino, data[off:off+1<<20], int64(off)); err != nil {
						t.Fatal(err)
					}
				}
			})
			buf := make([]byte, 1<<20)
			read := func(off int) int64 {
				t.Helper()
				before := c.Calls(t, "Range", "Txn")
				n, _, err := f.ReadInto(ino, uint64(off), len(buf), func(_ *Attr, n int) ([]byte, error) { return buf[:n], nil })
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
					if got := read(off); got != want {
						t.Errorf("%s: a warm READ at %d cost %d etcd requests, want %d", what, off, got, want)
					}
				}
			}
			check("the data in the top layer")
			write(func() { pushLayer(t, f) })
			check("the data in a frozen layer, nothing of the file in the top")
			edit := bytes.Repeat([]byte{'x'}, 5000)
			write(func() {
				if _, err := f.WriteAt(ino, edit, 1<<20+100); err != nil {
					t.Fatal(err)
				}
			})
			copy(data[1<<20+100:], edit)
			check("an edit in the top layer over a frozen one")
		})
	}
}

// TestTopCacheOwnership: two servers over one etcd store take turns
// owning a branch. While server A does not own it, its READs see what
// B writes at once; when A owns it again, what A cached of the top
// layer before B wrote is not used: its READs return B's bytes and
// attributes.
func TestTopCacheOwnership(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	ctx := context.Background()
	bucket := blobs.NewMem()
	o := etcdkv.Options{Prefix: "/own/"}
	_, a := newTestTree(t, c.NewStore(t, o), Options{Blobs: bucket, Shared: true})
	sb := openStore(t, c.NewStore(t, o), Options{Blobs: bucket, Shared: true})
	b, err := sb.OpenView(ctx, a.Top())
	if err != nil {
		t.Fatal(err)
	}
	b.SetReadOnly(true)
	a.SetReadOnly(false)
	old := randBytes(rand.New(rand.NewPCG(3, 4)), 3<<20)
	at, err := a.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(at.Ino, old, 0); err != nil {
		t.Fatal(err)
	}
	// readAs reads the whole file through v and checks bytes and mode.
	readAs := func(v *View, who string, want []byte, mode uint32) {
		t.Helper()
		for range 2 { // the second from what the first cached, if it may
			var seen Attr
			buf := make([]byte, len(want)+100)
			n, _, err := v.ReadInto(at.Ino, 0, len(buf), func(a *Attr, n int) ([]byte, error) { seen = *a; return buf[:n], nil })
			if err != nil || n != len(want) || !bytes.Equal(buf[:n], want) || seen.Mode&ModePerm != mode {
				t.Fatalf("%s: READ of %d bytes: %d, %v, mode %o; want the %d bytes written last, mode %o", who, len(buf), n, err, seen.Mode&ModePerm, len(want), mode)
			}
		}
	}
	readAs(a, "A, owner", old, 0o644)

	// A's lease is lost; B takes the branch over and rewrites the file.
	a.SetReadOnly(true)
	b.SetReadOnly(false)
	neu := randBytes(rand.New(rand.NewPCG(5, 6)), 2<<20)
	zero, mode := uint64(0), uint32(0o600)
	if _, err := b.SetAttr(at.Ino, SetAttr{Size: &zero, Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt(at.Ino, neu, 0); err != nil {
		t.Fatal(err)
	}
	readAs(a, "A, not the owner, after B's write", neu, 0o600)

	// B stops; A owns the branch again, and reads what B wrote.
	b.SetReadOnly(true)
	a.SetReadOnly(false)
	readAs(a, "A, owner again", neu, 0o600)
}

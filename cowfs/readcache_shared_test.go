package cowfs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestReadCacheAfterOtherServerRechunk: two Stores over one kv store, as
// two servers share one. A view on the first caches the frozen layer's
// references; the second rechunks that layer and sweeps the plain blocks
// it replaced, which the first Store's reference generation does not
// see. The first view's next READ still returns the file's bytes.
func TestReadCacheAfterOtherServerRechunk(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	st := kvtest.NewStore(t)
	_, f := newTestTree(t, st, Options{BlockSize: bs})
	data := make([]byte, 96*bs)
	rand.NewChaCha8([32]byte{7}).Read(data)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	_, y := pushLayer(t, f) // the data is frozen in y
	read := func(when string) {
		t.Helper()
		got := make([]byte, len(data))
		n, _, err := f.ReadAt(a.Ino, got, 0)
		if err != nil || !bytes.Equal(got[:n], data) {
			t.Fatalf("%s: read %d bytes (%v), want the file's %d", when, n, err, len(data))
		}
	}
	read("first read")
	read("cached read")
	other := openStore(t, st, Options{BlockSize: bs})
	rs, err := other.Rechunk(ctx, y, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Blocks == 0 {
		t.Fatalf("the other store rechunked nothing (%+v): the test set-up is wrong", rs)
	}
	sweep(t, other)
	read("read after another server's rechunk and sweep")
}

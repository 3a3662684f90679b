package cowfs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// countingBlobs counts the requests a blobs.Creator gets.
type countingBlobs struct {
	*blobs.Mem
	has, put, create atomic.Int64
}

func (c *countingBlobs) Has(ctx context.Context, k blobs.Key) (bool, error) {
	c.has.Add(1)
	return c.Mem.Has(ctx, k)
}

func (c *countingBlobs) Put(ctx context.Context, k blobs.Key, data []byte) error {
	c.put.Add(1)
	return c.Mem.Put(ctx, k, data)
}

func (c *countingBlobs) Create(ctx context.Context, k blobs.Key, data []byte) (bool, error) {
	c.create.Add(1)
	return c.Mem.Create(ctx, k, data)
}

func (c *countingBlobs) take() (has, put, create int64) {
	return c.has.Swap(0), c.put.Swap(0), c.create.Swap(0)
}

// TestBlobWriteAsksNothing: a WRITE uploads each new block in one request
// (a Create, no Has first); writing the same content again sends nothing
// while the Store knows it uploaded it; once a sweep deleted it, writing
// it again uploads it again and it reads back.
func TestBlobWriteAsksNothing(t *testing.T) {
	const bs = 32 << 10
	ctx := context.Background()
	cb := &countingBlobs{Mem: blobs.NewMem()}
	s, err := Open(ctx, kvtest.NewStore(t), Options{BlockSize: bs, Blobs: cb})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.NewTree(ctx, 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := s.View([]LayerID{l})
	data := randBytes(rand.New(rand.NewPCG(3, 4)), 1<<20)
	create := func(name string) InodeID {
		a, err := f.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	a := create("a")
	cb.take()
	if _, err := f.WriteAt(a, data, 0); err != nil {
		t.Fatal(err)
	}
	if has, put, cr := cb.take(); has != 0 || put != 0 || cr != 32 {
		t.Errorf("a WRITE of 32 new blocks asked %d Has, %d Put, %d Create; want 0, 0, 32", has, put, cr)
	}
	b := create("b")
	if _, err := f.WriteAt(b, data, 0); err != nil {
		t.Fatal(err)
	}
	if has, put, cr := cb.take(); has+put+cr != 0 {
		t.Errorf("a WRITE of 32 blocks the Store uploaded sent %d Has, %d Put, %d Create; want none", has, put, cr)
	}
	// Both files go, and the sweep deletes their blocks.
	for _, name := range []string{"a", "b"} {
		if err := f.Unlink(RootIno, name); err != nil {
			t.Fatal(err)
		}
	}
	if n := runSweep(t, s, func() {}); n < 32 {
		t.Fatalf("the sweep deleted %d blobs, want the 32 blocks", n)
	}
	c := create("c")
	cb.take()
	if _, err := f.WriteAt(c, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, cr := cb.take(); cr != 32 {
		t.Errorf("after the sweep a WRITE of the same blocks uploaded %d, want 32", cr)
	}
	got := make([]byte, len(data))
	if n, _, err := f.ReadAt(c, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("c reads %d bytes (%v), equal %v", n, err, bytes.Equal(got, data))
	}
}

package cowfs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// overlapStore passes a kv.Store through and, once armed, holds the first
// GetFunc of a content key until a second one runs beside it, recording
// that they overlapped. Its transactions allow concurrent reads as the
// store's do (kv.ConcurrentReader).
type overlapStore struct {
	kv.Store
	armed    atomic.Bool
	inflight atomic.Int32
	met      chan struct{}
	once     sync.Once
	overlap  atomic.Bool
}

func (o *overlapStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	return o.Store.View(ctx, func(tx kv.Txn) error { return fn(overlapTxn{tx, o}) })
}

type overlapTxn struct {
	kv.Txn
	o *overlapStore
}

func (t overlapTxn) ConcurrentGets() bool {
	c, ok := t.Txn.(kv.ConcurrentReader)
	return ok && c.ConcurrentGets()
}

func (t overlapTxn) GetFunc(k []byte, fn func([]byte) error) error {
	if o := t.o; o.armed.Load() && len(k) > 0 && k[0] == pfxContent {
		if o.inflight.Add(1) >= 2 {
			o.overlap.Store(true)
			o.once.Do(func() { close(o.met) })
		}
		// Not a timing assertion: a serial reader never sends a second
		// call, and the test fails on overlap, not on time.
		select {
		case <-o.met:
		case <-time.After(10 * time.Second):
			o.armed.Store(false) // no second call came: wait no more
		}
		defer o.inflight.Add(-1)
	}
	return t.Txn.GetFunc(k, fn)
}

// TestReadFetchesBlocksConcurrently checks that a READ of many stored
// blocks reads their content on two goroutines at once: its store reads
// overlap.
func TestReadFetchesBlocksConcurrently(t *testing.T) {
	const bs = 4096
	o := &overlapStore{Store: kvtest.NewStore(t), met: make(chan struct{})}
	_, f := newTestTree(t, o, Options{BlockSize: bs, InlineMax: 64})
	data := randBytes(rand.New(rand.NewPCG(1, 2)), 16*bs)
	a, err := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	o.armed.Store(true)
	buf := make([]byte, len(data))
	if n, _, err := f.ReadAt(a.Ino, buf, 0); err != nil || n != len(data) || !bytes.Equal(buf, data) {
		t.Fatalf("ReadAt = %d, %v; same bytes: %v", n, err, bytes.Equal(buf, data))
	}
	if !o.overlap.Load() {
		t.Fatal("a READ of 16 stored blocks read their content one at a time; want two goroutines at once")
	}
}

// TestReadConcurrentSameAsSerial reads files of every kind of block
// (holes, zeros, inline tails, stored blocks, patches, chunk references
// with and without edits, blocks past a truncate) at many offsets and
// lengths, through a view whose transactions allow concurrent reads and
// through one over the same store whose transactions do not, and checks
// that both return the bytes written.
func TestReadConcurrentSameAsSerial(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	st := kvtest.NewStore(t)
	sto, f := newTestTree(t, st, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(3, 4))
	fm := newFileModel(t, f)
	a := fm.create("a", randBytes(r, 64*bs+100))
	b := fm.create("b", randBytes(r, 40*bs))
	fm.write(b, 10*bs, make([]byte, 3*bs)) // zeros
	fm.write(b, 20*bs+5, []byte("edit"))   // a patch
	fm.truncate(b, 30*bs+7)
	fm.write(b, 35*bs, randBytes(r, 100)) // a hole, then an inline tail
	_, y := pushLayer(t, f)
	fm.write(a, 5*bs+3, []byte("patch-of-a-hash-block"))
	if _, err := sto.Rechunk(ctx, y, 1<<40); err != nil {
		t.Fatal(err)
	}
	fm.write(a, 9*bs+100, []byte("an edit of a chunk-referenced block"))
	fm.write(a, 12*bs, randBytes(r, 2*bs)) // stored blocks over chunk references
	serial, err := sto.OpenView(ctx, f.Top())
	if err != nil {
		t.Fatal(err)
	}
	// countingStore's transactions hide kv.ConcurrentReader: serial reads.
	cs := &countingStore{Store: st}
	serialStore := openStore(t, cs, Options{BlockSize: bs, InlineMax: 64})
	if serial, err = serialStore.OpenView(ctx, f.Top()); err != nil {
		t.Fatal(err)
	}
	for ino, want := range fm.files {
		for _, v := range []*View{f, serial} {
			for _, c := range []struct{ off, n int }{
				{0, len(want) + 10}, {0, 1 << 20}, {1, 16*bs - 2}, {bs - 1, 7*bs + 2},
				{3*bs + 17, 9 * bs}, {5 * bs, 4 * bs}, {len(want) - 5*bs - 3, 5*bs + 3},
			} {
				buf := bytes.Repeat([]byte{0xee}, c.n)
				n, _, err := v.ReadAt(ino, buf, int64(c.off))
				end := min(c.off+c.n, len(want))
				if err != nil || n != end-c.off || !bytes.Equal(buf[:n], want[c.off:end]) {
					t.Fatalf("inode %d, serial %v: ReadAt(%d, %d) = %d, %v; want %d bytes as written (same: %v)",
						ino, v == serial, c.off, c.n, n, err, end-c.off, err == nil && n == end-c.off && bytes.Equal(buf[:n], want[c.off:end]))
				}
			}
		}
	}
}

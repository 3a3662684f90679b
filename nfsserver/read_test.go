package nfsserver

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// readCountingStore counts the transactions and point lookups of a
// kv.Store: on a store where each is a round trip (etcd), they are what a
// READ waits for.
type readCountingStore struct {
	kv.Store
	txns, points atomic.Int64
}

func (c *readCountingStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	c.txns.Add(1)
	return c.Store.View(ctx, func(tx kv.Txn) error { return fn(readCountingTxn{tx, c}) })
}

func (c *readCountingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	c.txns.Add(1)
	return c.Store.Update(ctx, func(tx kv.Txn) error { return fn(readCountingTxn{tx, c}) })
}

func (c *readCountingStore) NewSnapshot() kv.Snapshot {
	c.txns.Add(1)
	return c.Store.NewSnapshot()
}

type readCountingTxn struct {
	kv.Txn
	c *readCountingStore
}

func (t readCountingTxn) Get(k []byte) ([]byte, error) {
	t.c.points.Add(1)
	return t.Txn.Get(k)
}

func (t readCountingTxn) GetFunc(k []byte, fn func([]byte) error) error {
	t.c.points.Add(1)
	return t.Txn.GetFunc(k, fn)
}

func (t readCountingTxn) Has(k []byte) (bool, error) {
	t.c.points.Add(1)
	return t.Txn.Has(k)
}

// TestReadOneTransaction checks that a READ reads the inode's attributes
// and its data in one store transaction, and that a warm READ reads no
// key besides the data, whether the file is in the top layer or a branch
// inherited it (the top layer's record and references are cached, and
// so are the frozen layers').
func TestReadOneTransaction(t *testing.T) {
	ctx := context.Background()
	cs := &readCountingStore{Store: kvtest.NewStore(t)}
	m := branchestest.NewManager(t, branches.Options{Store: cs, ReclaimDelay: -1})
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	root := c.mnt("/main")
	fh, _, st := k.create(root, "f", 1, sa{})
	must(t, st, "create")
	data := make([]byte, 3*maxIO/2)
	for i := range data {
		data[i] = byte(i * 13)
	}
	for off := 0; off < len(data); off += maxIO {
		_, _, _, st := k.write(fh, uint64(off), data[off:min(off+maxIO, len(data))], fileSync)
		must(t, st, "write")
	}
	if _, err := m.Fork(ctx, "main", "b"); err != nil {
		t.Fatal(err)
	}
	bfh, _, st := k.lookup(c.mnt("/b"), "f")
	must(t, st, "lookup in b")
	for _, tc := range []struct {
		name   string
		fh     []byte
		points int64 // besides content; -1: not checked
	}{
		{"top layer", fh, 0},
		{"inherited", bfh, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, off := range []uint64{0, maxIO, 0} { // the last one warm
				cs.txns.Store(0)
				cs.points.Store(0)
				got, eof, st := k.read(tc.fh, off, maxIO)
				must(t, st, "read")
				want := data[off:min(off+maxIO, uint64(len(data)))]
				if !bytes.Equal(got, want) || eof != (off+maxIO >= uint64(len(data))) {
					t.Fatalf("READ at %d: %d bytes eof=%v, want %d", off, len(got), eof, len(want))
				}
				if n := cs.txns.Load(); n != 1 {
					t.Fatalf("READ at %d: %d store transactions, want 1", off, n)
				}
			}
			// The warm READ above: its content is in Badger's 'c' keys,
			// one point read per 32 KiB block.
			blocks := int64(maxIO / (32 << 10))
			if n := cs.points.Load() - blocks; tc.points >= 0 && n != tc.points {
				t.Fatalf("warm READ: %d point reads besides %d blocks' content, want %d", n, blocks, tc.points)
			}
		})
	}
}

package cowfs

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// countingStore counts the transactions and point lookups of a kv.Store.
type countingStore struct {
	kv.Store
	txns, points atomic.Int64
}

func (c *countingStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	c.txns.Add(1)
	return c.Store.View(ctx, func(tx kv.Txn) error { return fn(countingTxn{tx, c}) })
}

func (c *countingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	c.txns.Add(1)
	return c.Store.Update(ctx, func(tx kv.Txn) error { return fn(countingTxn{tx, c}) })
}

// reset zeroes the counters.
func (c *countingStore) reset() { c.txns.Store(0); c.points.Store(0) }

type countingTxn struct {
	kv.Txn
	c *countingStore
}

func (t countingTxn) Get(k []byte) ([]byte, error) {
	t.c.points.Add(1)
	return t.Txn.Get(k)
}

func (t countingTxn) GetFunc(k []byte, fn func([]byte) error) error {
	t.c.points.Add(1)
	return t.Txn.GetFunc(k, fn)
}

func (t countingTxn) Has(k []byte) (bool, error) {
	t.c.points.Add(1)
	return t.Txn.Has(k)
}

// newCountingFS returns a view over a counting store.
func newCountingFS(t *testing.T, opts Options) (*View, *countingStore, *Store) {
	t.Helper()
	cs := &countingStore{Store: kvtest.NewStore(t)}
	s, f := newTestTree(t, cs, opts)
	return f, cs, s
}

// TestGetAttrTopOnePointLookup checks that the attributes of an inode
// written in the top layer cost one point lookup in one transaction.
func TestGetAttrTopOnePointLookup(t *testing.T) {
	f, cs, _ := newCountingFS(t, Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs.reset()
	if _, err := f.GetAttr(a.Ino); err != nil {
		t.Fatal(err)
	}
	if txns, points := cs.txns.Load(), cs.points.Load(); txns != 1 || points != 1 {
		t.Fatalf("GetAttr of a top-layer inode: %d transactions, %d point lookups; want 1, 1", txns, points)
	}
}

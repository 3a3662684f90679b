package kvtest

import (
	"context"
	"fmt"

	"github.com/branchnfs/branchnfs/kv"
)

// Limited wraps a store so that it reports lim as its Limits and enforces
// them as etcd does: a Set or Delete past Writes or Bytes fails with
// kv.ErrTxnTooBig, and so does the commit of an Update that writes and
// read more than Reads keys. It shows that code sizes its batches by the
// store's Limits (etcd's 128 writes) without an etcd cluster. lim must not
// exceed the wrapped store's own limits.
func Limited(s kv.Store, lim kv.Limits) kv.Store { return &limited{Store: s, lim: lim} }

type limited struct {
	kv.Store
	lim kv.Limits // read only
}

func (l *limited) Limits() kv.Limits { return l.lim }

func (l *limited) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return l.Store.Update(ctx, func(tx kv.Txn) error {
		lt := &limitedTxn{Txn: tx, lim: l.lim}
		if err := fn(lt); err != nil {
			return err
		}
		if lt.writes > 0 && lt.reads > l.lim.Reads {
			return fmt.Errorf("%w: the transaction read %d keys, over Limits.Reads (%d)", kv.ErrTxnTooBig, lt.reads, l.lim.Reads)
		}
		return nil
	})
}

type limitedTxn struct {
	kv.Txn
	lim           kv.Limits
	writes, reads int
	bytes         int
}

func (t *limitedTxn) read(key []byte) {
	t.reads++
	t.bytes += len(key) + t.lim.OpBytes
}

func (t *limitedTxn) Get(key []byte) ([]byte, error) {
	t.read(key)
	return t.Txn.Get(key)
}

func (t *limitedTxn) GetFunc(key []byte, fn func([]byte) error) error {
	t.read(key)
	return t.Txn.GetFunc(key, fn)
}

func (t *limitedTxn) Has(key []byte) (bool, error) {
	t.read(key)
	return t.Txn.Has(key)
}

func (t *limitedTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	return t.Txn.Iterate(prefix, start, keysOnly, func(k, v []byte) (bool, error) {
		t.read(k)
		return fn(k, v)
	})
}

func (t *limitedTxn) write(key, value []byte) error {
	size := len(key) + len(value) + t.lim.OpBytes
	if t.writes+1 > t.lim.Writes {
		return fmt.Errorf("%w: more than Limits.Writes (%d) writes", kv.ErrTxnTooBig, t.lim.Writes)
	}
	if t.bytes+size > t.lim.Bytes {
		return fmt.Errorf("%w: more than Limits.Bytes (%d) bytes", kv.ErrTxnTooBig, t.lim.Bytes)
	}
	t.writes++
	t.bytes += size
	return nil
}

func (t *limitedTxn) Set(key, value []byte) error {
	if err := t.write(key, value); err != nil {
		return err
	}
	return t.Txn.Set(key, value)
}

func (t *limitedTxn) Delete(key []byte) error {
	if err := t.write(key, nil); err != nil {
		return err
	}
	return t.Txn.Delete(key)
}

package txnsize

import (
	"context"
	"sync"

	"github.com/branchnfs/branchnfs/kv"
)

// Txn is what one committed Update did.
type Txn struct {
	Writes int   // Set and Delete calls on distinct keys
	Bytes  int64 // bytes of the keys and values written
	Reads  int   // distinct keys read: Get, GetFunc, Has, and keys iterated
	Ranges int   // Iterate calls
}

// Compares is what an etcd commit of the transaction checks: one compare
// per key read and one per range iterated (see kv/etcdkv).
func (t Txn) Compares() int { return t.Reads + t.Ranges }

// Recorder is a kv.Store that records the transactions committed through
// it. It is safe for concurrent use.
type Recorder struct {
	kv.Store

	mu   sync.Mutex // protects the following
	txns []Txn
}

// New wraps s.
func New(s kv.Store) *Recorder { return &Recorder{Store: s} }

// Take returns the transactions committed since the last Take and forgets
// them.
func (r *Recorder) Take() []Txn {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.txns
	r.txns = nil
	return t
}

// Update records the attempt that committed, if it wrote anything.
func (r *Recorder) Update(ctx context.Context, fn func(kv.Txn) error) error {
	var last *recTxn
	err := r.Store.Update(ctx, func(tx kv.Txn) error {
		last = &recTxn{Txn: tx, reads: map[string]bool{}, writes: map[string]bool{}}
		return fn(last)
	})
	if err == nil && last != nil && len(last.writes) > 0 {
		r.mu.Lock()
		r.txns = append(r.txns, Txn{Writes: len(last.writes), Bytes: last.bytes, Reads: len(last.reads), Ranges: last.ranges})
		r.mu.Unlock()
	}
	return err
}

type recTxn struct {
	kv.Txn
	reads  map[string]bool
	writes map[string]bool
	bytes  int64
	ranges int
}

// read records a read of key, unless the transaction wrote it before: a
// store answers that from its own buffer.
func (t *recTxn) read(key []byte) {
	if !t.writes[string(key)] {
		t.reads[string(key)] = true
	}
}

func (t *recTxn) Get(key []byte) ([]byte, error) {
	t.read(key)
	return t.Txn.Get(key)
}

func (t *recTxn) GetFunc(key []byte, fn func([]byte) error) error {
	t.read(key)
	return t.Txn.GetFunc(key, fn)
}

func (t *recTxn) Has(key []byte) (bool, error) {
	t.read(key)
	return t.Txn.Has(key)
}

func (t *recTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	t.ranges++
	return t.Txn.Iterate(prefix, start, keysOnly, func(k, v []byte) (bool, error) {
		t.read(k)
		return fn(k, v)
	})
}

func (t *recTxn) Set(key, value []byte) error {
	t.writes[string(key)] = true
	t.bytes += int64(len(key) + len(value))
	return t.Txn.Set(key, value)
}

func (t *recTxn) Delete(key []byte) error {
	t.writes[string(key)] = true
	t.bytes += int64(len(key))
	return t.Txn.Delete(key)
}

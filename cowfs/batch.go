package cowfs

import "github.com/branchnfs/branchnfs/kv"

// LayerKeyLen bounds the length of the keys a layer holds (see keys.go).
const LayerKeyLen = 26

// DeleteBatch is how many keys of at most keyLen bytes one transaction of
// the store may delete: 4,096 (which bounds the memory of a batch), or
// fewer when the kv store's Limits say so (128 with etcd's defaults).
func (s *Store) DeleteBatch(keyLen int) int { return deleteBatch(s.kv, keyLen) }

// limits is the kv store's Limits for a transaction that writes a
// branch's layers: on a shared store (Options.Shared) its commit may
// compare up to kv.MaxFences fencing tokens (kv.Fence) besides what it
// read, so it may read that many keys fewer.
func (s *Store) limits() kv.Limits {
	l := s.kv.Limits()
	if s.opts.Shared && l.Reads > kv.MaxFences {
		l.Reads -= kv.MaxFences
	}
	return l
}

func deleteBatch(store kv.Store, keyLen int) int {
	l := store.Limits()
	return min(4096, l.Batch(1, keyLen+l.OpBytes))
}

// maxWriteBatch bounds the writes of one batch whatever the store allows,
// which bounds the memory a transaction holds.
const maxWriteBatch = 2000

// writeBatch returns how many of the next n writes, the k-th of which has
// size(k) bytes of key and value, one transaction of a store with limits
// lim holds when it reads nothing: as many as fit lim.Writes and
// lim.Bytes (OpBytes each), at most maxWriteBatch, and at least one (a
// write too big alone fails with kv.ErrTxnTooBig).
func writeBatch(lim kv.Limits, n int, size func(k int) int) int {
	bytes := 0
	for k := range min(n, lim.Writes, maxWriteBatch) {
		bytes += size(k) + lim.OpBytes
		if bytes > lim.Bytes {
			return max(k, 1)
		}
	}
	return max(min(n, lim.Writes, maxWriteBatch), 1)
}

// countTxn counts what a transaction wrote and read, as kv.Limits counts
// them, so a batch can stop before it would pass the store's limits.
type countTxn struct {
	kv.Txn
	opBytes              int
	writes, reads, bytes int
}

// inner returns the transaction t counts for (intend finds the attempt's
// intents through it).
func (t *countTxn) inner() kv.Txn { return t.Txn }

func (t *countTxn) read(key []byte) {
	t.reads++
	t.bytes += len(key) + t.opBytes
}

func (t *countTxn) Get(key []byte) ([]byte, error) {
	t.read(key)
	return t.Txn.Get(key)
}

func (t *countTxn) GetFunc(key []byte, fn func([]byte) error) error {
	t.read(key)
	return t.Txn.GetFunc(key, fn)
}

func (t *countTxn) Has(key []byte) (bool, error) {
	t.read(key)
	return t.Txn.Has(key)
}

func (t *countTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	t.reads++ // the range
	t.bytes += 2 * (len(prefix) + 8 + t.opBytes)
	return t.Txn.Iterate(prefix, start, keysOnly, func(k, v []byte) (bool, error) {
		t.read(k)
		return fn(k, v)
	})
}

func (t *countTxn) Set(key, value []byte) error {
	t.writes++
	t.bytes += len(key) + len(value) + t.opBytes
	return t.Txn.Set(key, value)
}

func (t *countTxn) Delete(key []byte) error {
	t.writes++
	t.bytes += len(key) + t.opBytes
	return t.Txn.Delete(key)
}

// fits reports whether writes more writes, reads more reads and bytes
// more bytes still fit lim.
func (t *countTxn) fits(lim kv.Limits, writes, reads, bytes int) bool {
	return t.writes+writes <= lim.Writes && t.reads+reads <= lim.Reads && t.bytes+bytes <= lim.Bytes
}

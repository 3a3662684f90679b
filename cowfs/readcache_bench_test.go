package cowfs

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
)

// roundTripStore counts the kv reads of layer keys (point reads and
// iterations: a round trip each on a networked store such as etcd), and
// makes each take delay, as a store across a network would. Content keys
// are neither counted nor delayed (on a scale-out store they live in the
// blob store).
type roundTripStore struct {
	kv.Store
	delay time.Duration
	reads atomic.Int64
}

func (c *roundTripStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	return c.Store.View(ctx, func(tx kv.Txn) error { return fn(roundTripTxn{tx, c}) })
}

func (c *roundTripStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return c.Store.Update(ctx, func(tx kv.Txn) error { return fn(roundTripTxn{tx, c}) })
}

func (c *roundTripStore) trip(k []byte) {
	if len(k) > 0 && k[0] == pfxContent {
		return
	}
	c.reads.Add(1)
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
}

type roundTripTxn struct {
	kv.Txn
	c *roundTripStore
}

func (t roundTripTxn) Get(k []byte) ([]byte, error) { t.c.trip(k); return t.Txn.Get(k) }

func (t roundTripTxn) GetFunc(k []byte, fn func([]byte) error) error {
	t.c.trip(k)
	return t.Txn.GetFunc(k, fn)
}

func (t roundTripTxn) Has(k []byte) (bool, error) { t.c.trip(k); return t.Txn.Has(k) }

func (t roundTripTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	t.c.trip(prefix)
	return t.Txn.Iterate(prefix, start, keysOnly, fn)
}

// BenchmarkReadFrozen measures warm sequential 1 MiB READs of a 32 MiB file
// (32 KiB blocks) held in frozen layers: in a branch's only frozen layer
// (depth 1, a branch just forked from main) and three layers down (depth
// 3, two layers between holding an edit each), with the frozen-reference
// cache and without it (BlockCacheBytes -1), on Badger on disk and on the
// same with 200µs per kv read of a layer key (an etcd-like round trip).
// reads/op is the kv reads of layer keys per READ.
func BenchmarkReadFrozen(b *testing.B) {
	const size, bs = 32 << 20, 32 << 10
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(data)
	for _, store := range []struct {
		name  string
		delay time.Duration
	}{{"badger", 0}, {"latency", 200 * time.Microsecond}} {
		for _, depth := range []int{1, 3} {
			for _, cache := range []struct {
				name  string
				bytes int
			}{{"nocache", -1}, {"cache", 0}} {
				b.Run(store.name+"/depth"+string(rune('0'+depth))+"/"+cache.name, func(b *testing.B) {
					st, err := kv.OpenBadger(b.TempDir(), kv.BadgerOptions{GCInterval: -1})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { st.Close() })
					rt := &roundTripStore{Store: st}
					_, f := newTestTree(b, rt, Options{BlockSize: bs, BlockCacheBytes: cache.bytes})
					a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
					if err != nil {
						b.Fatal(err)
					}
					for off := 0; off < size; off += 1 << 20 {
						if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
							b.Fatal(err)
						}
					}
					for d := 1; d < depth; d++ {
						pushLayer(b, f)
						if _, err := f.WriteAt(a.Ino, []byte("edit"), int64(d*size/4)); err != nil {
							b.Fatal(err)
						}
					}
					pushLayer(b, f)
					buf := make([]byte, 1<<20)
					read := func(i int) {
						off := int64(i%(size>>20)) << 20
						if _, _, err := f.ReadAt(a.Ino, buf, off); err != nil {
							b.Fatal(err)
						}
					}
					for i := range size >> 20 { // warm: the file once
						read(i)
					}
					rt.delay = store.delay
					rt.reads.Store(0)
					b.SetBytes(1 << 20)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						read(i)
					}
					b.StopTimer()
					b.ReportMetric(float64(rt.reads.Load())/float64(b.N), "reads/op")
				})
			}
		}
	}
}

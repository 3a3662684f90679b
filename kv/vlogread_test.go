package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestReadValue (with the mappings trimmed: TrimAbove -1) checks
// ReadValue against GetFunc for values in the LSM
// tree and in the value log, around the sizes where the entry header's
// length fields grow a byte, with keys of several lengths, whole, in
// part and from an offset; and again after value-log GC moved them. It
// checks that the value-log reads did go through pread.
func TestReadValue(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.WithValueLogFileSize(kv.BadgerOptions{GCInterval: -1, TrimAbove: -1, ValueThreshold: 1 << 10}, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := []int{0, 1, 100, 1023, 1024, 1025, 16383, 16384, 16385, 32 << 10, 128<<10 - 1, 128 << 10, 1 << 20}
	want := map[string][]byte{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, size := range sizes {
		for _, klen := range []int{1, 33, 119, 120, 200} {
			k := bytes.Repeat([]byte{byte('a' + i)}, klen)
			k[len(k)-1] = byte(klen)
			v := make([]byte, size)
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set(k, v) }); err != nil {
				t.Fatal(err)
			}
			want[string(k)] = v
		}
	}
	// Garbage, for the GC below to move the live values out of their logs.
	for i := range 40 {
		k := []byte(fmt.Sprintf("garbage%03d", i))
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set(k, make([]byte, 256<<10)) }); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Delete(k) }); err != nil {
			t.Fatal(err)
		}
	}
	check := func(stage string) {
		t.Helper()
		before, _ := kv.ValueReads(s)
		err := s.View(ctx, func(tx kv.Txn) error {
			vr, ok := tx.(kv.ValueReader)
			if !ok {
				return errors.New("a Badger transaction is no ValueReader")
			}
			for k, v := range want {
				for _, c := range []struct{ off, n int }{{0, len(v)}, {0, len(v) + 10}, {0, len(v) / 2}, {len(v) / 3, len(v)}, {len(v) / 2, 7}, {len(v), 5}, {len(v) + 3, 5}} {
					dst := bytes.Repeat([]byte{0xee}, c.n)
					n, err := vr.ReadValue([]byte(k), c.off, dst)
					if err != nil {
						return fmt.Errorf("key of %d bytes, value of %d, off %d n %d: %w", len(k), len(v), c.off, c.n, err)
					}
					var w []byte
					if c.off < len(v) {
						w = v[c.off:min(len(v), c.off+c.n)]
					}
					if n != len(w) || !bytes.Equal(dst[:n], w) || bytes.Count(dst[n:], []byte{0xee}) != c.n-n {
						return fmt.Errorf("key of %d bytes, value of %d, off %d n %d: read %d bytes, wrong", len(k), len(v), c.off, c.n, n)
					}
				}
			}
			if _, err := vr.ReadValue([]byte("missing"), 0, make([]byte, 8)); !errors.Is(err, kv.ErrNotFound) {
				return fmt.Errorf("missing key: %v, want ErrNotFound", err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		after, off := kv.ValueReads(s)
		if off {
			t.Fatalf("%s: the pread reader turned itself off", stage)
		}
		// Values of 1 KiB and more live in the value log: 8 sizes x 5 keys,
		// of 7 reads each, the empty ones not counted.
		if got := after - before; got < 8*5*4 {
			t.Fatalf("%s: %d values read with pread, want at least %d", stage, got, 8*5*4)
		}
	}
	check("fresh")
	if _, err := s.ReclaimSpace(ctx); err != nil {
		t.Fatal(err)
	}
	if n := kv.OpenValueLogs(s); n != 0 {
		t.Fatalf("%d value logs still open after value-log GC", n)
	}
	check("after value-log GC")
}

// TestReadValues reads, with ReadValues, values written in one
// transaction (one after another in the value log, read with one
// preadv), mixed with values in the LSM tree, one read into a shorter
// buffer, and one written later; then a batch with a missing key.
func TestReadValues(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, TrimAbove: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	val := func(n int) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	var keys [][]byte
	var vals [][]byte
	err = s.Update(ctx, func(tx kv.Txn) error {
		for i := range 40 {
			k := []byte(fmt.Sprintf("c%031d", i))
			v := val([]int{32 << 10, 100, 5000, 128, 32 << 10, 32 << 10}[i%6])
			if err := tx.Set(k, v); err != nil {
				return err
			}
			keys, vals = append(keys, k), append(vals, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	late, lateV := []byte("late"), val(20000)
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set(late, lateV) }); err != nil {
		t.Fatal(err)
	}
	keys, vals = append(keys, late), append(vals, lateV)
	before, _ := kv.ValueReads(s)
	err = s.View(ctx, func(tx kv.Txn) error {
		vr := tx.(kv.ValueReader)
		rs := make([]kv.ValueRead, len(keys))
		for i := range keys {
			n := len(vals[i]) + 16
			if i == 7 {
				n = len(vals[i]) - 10 // shorter than the value
			}
			rs[i] = kv.ValueRead{Key: keys[i], Dst: bytes.Repeat([]byte{0xee}, n)}
		}
		if err := vr.ReadValues(rs); err != nil {
			return err
		}
		for i, r := range rs {
			w := vals[i][:min(len(vals[i]), len(r.Dst))]
			if r.N != len(w) || !bytes.Equal(r.Dst[:r.N], w) {
				return fmt.Errorf("value %d (%d bytes, buffer %d): read %d bytes, wrong", i, len(vals[i]), len(r.Dst), r.N)
			}
		}
		rs = []kv.ValueRead{{Key: keys[0], Dst: make([]byte, 32<<10)}, {Key: []byte("missing"), Dst: make([]byte, 10)}}
		if err := vr.ReadValues(rs); !errors.Is(err, kv.ErrNotFound) {
			return fmt.Errorf("a batch with a missing key: %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after, off := kv.ValueReads(s)
	if off {
		t.Fatal("the pread reader turned itself off")
	}
	if after-before < 20 || kv.RunReads(s) < 10 {
		t.Fatalf("%d values read with pread, %d of them in runs; want at least 20 and 10", after-before, kv.RunReads(s))
	}
}

// setValues sets n keys in one transaction, the i-th to val(i), and
// returns the keys and values.
func setValues(t *testing.T, s kv.Store, n int, val func(int) []byte) (keys, vals [][]byte) {
	t.Helper()
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		for i := range n {
			k, v := []byte(fmt.Sprintf("c%031d", i)), val(i)
			keys, vals = append(keys, k), append(vals, v)
			if err := tx.Set(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, vals
}

// TestReadValuesInLogOrder: a large batch of values written in one
// transaction (together in the value log, in no particular order among
// themselves) is read in the log's order: one preadv, however the caller
// orders the batch.
func TestReadValuesInLogOrder(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, TrimAbove: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	keys, vals := setValues(t, s, 32, func(int) []byte {
		v := make([]byte, 32<<10)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		return v
	})
	for _, fixed := range []bool{false, true, true} { // the last from remembered places
		before := kv.Preadvs(s)
		rs := make([]kv.ValueRead, len(keys))
		perm := rng.Perm(len(keys)) // the caller's order
		err := s.View(ctx, func(tx kv.Txn) error {
			for i := range keys {
				rs[i] = kv.ValueRead{Key: keys[perm[i]], Dst: make([]byte, 32<<10), Fixed: fixed}
			}
			return tx.(kv.ValueReader).ReadValues(rs)
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if v := vals[perm[i]]; r.N != len(v) || !bytes.Equal(r.Dst, v) {
				t.Fatalf("fixed %v: value %d read wrong (%d bytes)", fixed, i, r.N)
			}
		}
		if n := kv.Preadvs(s) - before; n != 1 {
			t.Errorf("fixed %v: %d preadvs for 32 values written together, want 1", fixed, n)
		}
	}
}

// TestReadValuesFixed: values of Fixed keys are read the second time from
// the locations found the first time, without a lookup; a location that
// turns out wrong (its header and key do not match) is dropped and the key
// looked up, and the reader stays on; a Fixed key that is missing is
// ErrNotFound.
func TestReadValuesFixed(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, TrimAbove: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys, vals := setValues(t, s, 8, func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, 32<<10) })
	read := func(what string) {
		t.Helper()
		err := s.View(ctx, func(tx kv.Txn) error {
			rs := make([]kv.ValueRead, len(keys))
			for i := range keys {
				rs[i] = kv.ValueRead{Key: keys[i], Dst: make([]byte, 40<<10), Fixed: true}
			}
			if err := tx.(kv.ValueReader).ReadValues(rs); err != nil {
				return err
			}
			for i, r := range rs {
				if r.N != len(vals[i]) || !bytes.Equal(r.Dst[:r.N], vals[i]) {
					return fmt.Errorf("value %d: %d bytes, wrong", i, r.N)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	read("first read")
	if n := kv.CachedReads(s); n != 0 {
		t.Fatalf("first read: %d values from cached locations, want 0", n)
	}
	read("second read")
	if n := kv.CachedReads(s); n != int64(len(keys)) {
		t.Fatalf("second read: %d values from cached locations, want %d", n, len(keys))
	}
	if !kv.MisplaceCached(s, keys[3], 7) {
		t.Fatal("key 3's location is not cached")
	}
	read("read with a wrong location")
	if _, off := kv.ValueReads(s); off {
		t.Fatal("a wrong cached location turned the pread reader off")
	}
	read("read after the wrong location was dropped")
	if _, off := kv.ValueReads(s); off {
		t.Fatal("the pread reader turned itself off")
	}
	err = s.View(ctx, func(tx kv.Txn) error {
		rs := []kv.ValueRead{{Key: keys[0], Dst: make([]byte, 40<<10), Fixed: true}, {Key: []byte("missing"), Dst: make([]byte, 10), Fixed: true}}
		return tx.(kv.ValueReader).ReadValues(rs)
	})
	if !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("a missing Fixed key: %v, want ErrNotFound", err)
	}
}

// TestFixedWriterLocates: values set with SetFixed, and values HasFixed
// found, are read the first time from where the write or the lookup put
// them, without a lookup of their own; a small value (kept in the LSM
// tree), a transaction that failed, and a key deleted before the read
// leave nothing behind that a read would use wrongly.
func TestFixedWriterLocates(t *testing.T) {
	ctx := context.Background()
	s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, TrimAbove: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, 32<<10) }
	key := func(i int) []byte { return []byte(fmt.Sprintf("f%031d", i)) }
	// read reads keys [from, to) as Fixed and reports how many came from
	// remembered places.
	read := func(from, to int) int64 {
		t.Helper()
		before := kv.CachedReads(s)
		err := s.View(ctx, func(tx kv.Txn) error {
			var rs []kv.ValueRead
			for i := from; i < to; i++ {
				rs = append(rs, kv.ValueRead{Key: key(i), Dst: make([]byte, 40<<10), Fixed: true})
			}
			if err := tx.(kv.ValueReader).ReadValues(rs); err != nil {
				return err
			}
			for j, r := range rs {
				if want := val(from + j); r.N != len(want) || !bytes.Equal(r.Dst[:r.N], want) {
					return fmt.Errorf("value %d: %d bytes, wrong", from+j, r.N)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return kv.CachedReads(s) - before
	}

	// Values 0-7 set with SetFixed, in one transaction.
	err = s.Update(ctx, func(tx kv.Txn) error {
		fw, ok := tx.(kv.FixedWriter)
		if !ok {
			return fmt.Errorf("%T is not a kv.FixedWriter", tx)
		}
		for i := range 8 {
			if err := fw.SetFixed(key(i), val(i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := read(0, 8); n != 8 {
		t.Fatalf("first read after SetFixed: %d of 8 values from remembered places, want 8", n)
	}

	// Values 8-15 set plainly, then found by HasFixed.
	for i := 8; i < 16; i++ {
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set(key(i), val(i)) }); err != nil {
			t.Fatal(err)
		}
	}
	err = s.Update(ctx, func(tx kv.Txn) error {
		fw := tx.(kv.FixedWriter)
		for i := 8; i < 16; i++ {
			if ok, err := fw.HasFixed(key(i)); err != nil || !ok {
				return fmt.Errorf("HasFixed of stored key %d: %v, %v", i, ok, err)
			}
		}
		if ok, err := fw.HasFixed([]byte("missing")); err != nil || ok {
			return fmt.Errorf("HasFixed of a missing key: %v, %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := read(8, 16); n != 8 {
		t.Fatalf("first read after HasFixed: %d of 8 values from remembered places, want 8", n)
	}

	// A transaction that fails stores nothing and locates nothing.
	errFail := errors.New("fail")
	err = s.Update(ctx, func(tx kv.Txn) error {
		if err := tx.(kv.FixedWriter).SetFixed(key(16), val(16)); err != nil {
			return err
		}
		return errFail
	})
	if !errors.Is(err, errFail) {
		t.Fatalf("failing transaction: %v", err)
	}
	if !errors.Is(s.View(ctx, func(tx kv.Txn) error {
		return tx.(kv.ValueReader).ReadValues([]kv.ValueRead{{Key: key(16), Dst: make([]byte, 40<<10), Fixed: true}})
	}), kv.ErrNotFound) {
		t.Fatal("a value of a failed transaction was read")
	}

	// A small value lives in the LSM tree: SetFixed has nothing to
	// locate, and it reads back.
	small := []byte("small")
	err = s.Update(ctx, func(tx kv.Txn) error { return tx.(kv.FixedWriter).SetFixed([]byte("small"), small) })
	if err != nil {
		t.Fatal(err)
	}
	before := kv.CachedReads(s)
	err = s.View(ctx, func(tx kv.Txn) error {
		rs := []kv.ValueRead{{Key: []byte("small"), Dst: make([]byte, 10), Fixed: true}, {Key: key(0), Dst: make([]byte, 40<<10), Fixed: true}}
		if err := tx.(kv.ValueReader).ReadValues(rs); err != nil {
			return err
		}
		if !bytes.Equal(rs[0].Dst[:rs[0].N], small) {
			return fmt.Errorf("small value read back as %q", rs[0].Dst[:rs[0].N])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := kv.CachedReads(s) - before; n != 1 {
		t.Fatalf("a small value and a large one: %d from remembered places, want 1 (the large one)", n)
	}
	if _, off := kv.ValueReads(s); off {
		t.Fatal("the pread reader turned itself off")
	}
}

// TestReadValueMapped: while the value logs' mappings are not trimmed
// (the process's file-backed memory under TrimAbove), single values are
// copied out of the mappings, whose pages stay mapped, not read with
// preads; once trimming, with preads. Batches always go by preads.
func TestReadValueMapped(t *testing.T) {
	ctx := context.Background()
	for _, above := range []int64{1 << 40, -1} {
		s, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, TrimEvery: 64 << 10, TrimAbove: above})
		if err != nil {
			t.Fatal(err)
		}
		v := bytes.Repeat([]byte("0123456789abcdef"), 2<<10)
		for i := range 16 {
			if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprint("k", i)), v) }); err != nil {
				t.Fatal(err)
			}
		}
		err = s.View(ctx, func(tx kv.Txn) error {
			vr := tx.(kv.ValueReader)
			for range 4 {
				for i := range 16 {
					dst := make([]byte, len(v)+1)
					n, err := vr.ReadValue([]byte(fmt.Sprint("k", i)), 0, dst)
					if err != nil {
						return err
					}
					if n != len(v) || !bytes.Equal(dst[:n], v) {
						return fmt.Errorf("value %d read wrong", i)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		reads, _ := kv.ValueReads(s)
		if trimmed := above < 0; (reads > 0) != trimmed {
			t.Errorf("TrimAbove %d: %d single values read with pread, want them read so: %v", above, reads, trimmed)
		}
		err = s.View(ctx, func(tx kv.Txn) error {
			rs := make([]kv.ValueRead, 16)
			for i := range rs {
				rs[i] = kv.ValueRead{Key: []byte(fmt.Sprint("k", i)), Dst: make([]byte, len(v))}
			}
			if err := tx.(kv.ValueReader).ReadValues(rs); err != nil {
				return err
			}
			for i, r := range rs {
				if r.N != len(v) || !bytes.Equal(r.Dst, v) {
					return fmt.Errorf("value %d of a batch read wrong", i)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if after, _ := kv.ValueReads(s); after-reads != 16 {
			t.Errorf("TrimAbove %d: %d values of a batch of 16 read with pread, want all", above, after-reads)
		}
		s.Close()
	}
}

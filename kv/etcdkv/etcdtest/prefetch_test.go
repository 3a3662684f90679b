package etcdtest_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// readAll is what a View reads of key and of an Iterate of prefix from
// start, prefetching both first when prefetch is set.
func readAll(s kv.Store, prefetch bool, key, prefix, start string, keysOnly bool) (string, error) {
	return readSome(s, prefetch, key, prefix, start, keysOnly, 0, 0)
}

// readSome is readAll with the prefetched range's Limit, and an Iterate
// that stops after upTo keys (0: reads them all).
func readSome(s kv.Store, prefetch bool, key, prefix, start string, keysOnly bool, limit, upTo int) (string, error) {
	var out string
	err := s.View(ctx, func(tx kv.Txn) error {
		if prefetch {
			rng := kv.IterRange{Prefix: []byte(prefix), Start: []byte(start), KeysOnly: keysOnly, Limit: limit}
			if err := tx.(kv.Prefetcher).Prefetch([][]byte{[]byte(key)}, []kv.IterRange{rng}); err != nil {
				return err
			}
		}
		v, err := tx.Get([]byte(key))
		if errors.Is(err, kv.ErrNotFound) {
			v, err = []byte("<none>"), nil
		}
		if err != nil {
			return err
		}
		out = key + "=" + string(v)
		var st []byte
		if start != "" {
			st = []byte(start)
		}
		n := 0
		return tx.Iterate([]byte(prefix), st, keysOnly, func(k, v []byte) (bool, error) {
			out += fmt.Sprintf(" %s=%q", k, v)
			n++
			return upTo == 0 || n < upTo, nil
		})
	})
	return out, err
}

// TestPrefetch checks that a View doing a Prefetch, then a Get and an
// Iterate of what it prefetched, costs one request, and reads what it
// reads without the Prefetch: an Iterate longer than one page goes on
// past the prefetched page, and a Get of a key not prefetched still reads.
func TestPrefetch(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	const prefix = "/etcdtest/prefetch/"
	s := c.NewStore(t, etcdkv.Options{Prefix: prefix, PageSize: 4})
	err := s.Update(ctx, func(tx kv.Txn) error {
		for _, k := range []string{"k", "other", "p/00", "q/0", "q/1"} {
			if err := tx.Set([]byte(k), []byte("v"+k)); err != nil {
				return err
			}
		}
		for i := range 11 {
			if err := tx.Set(fmt.Appendf(nil, "r/%02d", i), fmt.Appendf(nil, "r%d", i)); err != nil {
				return err
			}
		}
		return tx.Set([]byte("s"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := func() int64 { return c.Calls(t, "Range", "Txn") }
	for _, tc := range []struct {
		key, prefix, start string
		keysOnly           bool
		limit, upTo        int   // the range's Limit; keys the Iterate reads (0: all)
		calls              int64 // requests with the Prefetch
	}{
		{key: "k", prefix: "r/", limit: 3, upTo: 3, calls: 1}, // what a READ prefetches: the keys it reads
		{key: "k", prefix: "r/", limit: 3, upTo: 4, calls: 2}, // one more: a page of its own
		{key: "k", prefix: "r/", limit: 3, calls: 3},          // 11 keys: 3, then pages of 4, 4
		{key: "k", prefix: "r/", limit: 20, calls: 3},         // the page size still bounds it
		{key: "k", prefix: "r/", upTo: 4, calls: 1},           // no limit: a page of 4
		{key: "k", prefix: "q/", calls: 1},
		{key: "missing", prefix: "p/", calls: 1},
		{key: "s", prefix: "none/", calls: 1},
		{key: "k", prefix: "q/", keysOnly: true, calls: 1},
		{key: "k", prefix: "r/", calls: 3},                 // 11 keys: pages of 4, 4, 3
		{key: "k", prefix: "r/", start: "r/03", calls: 2},  // 8 keys
		{key: "k", prefix: "r/", start: "r/099", calls: 1}, // none
	} {
		name := fmt.Sprintf("%s,%s,%s,%v,limit=%d,upTo=%d", tc.key, tc.prefix, tc.start, tc.keysOnly, tc.limit, tc.upTo)
		want, err := readSome(s, false, tc.key, tc.prefix, tc.start, tc.keysOnly, 0, tc.upTo)
		if err != nil {
			t.Fatal(err)
		}
		before := calls()
		got, err := readSome(s, true, tc.key, tc.prefix, tc.start, tc.keysOnly, tc.limit, tc.upTo)
		if err != nil {
			t.Fatal(err)
		}
		if n := calls() - before; n != tc.calls {
			t.Errorf("%s: %d requests, want %d", name, n, tc.calls)
		}
		if got != want {
			t.Errorf("%s: read with Prefetch\n%s\nwithout\n%s", name, got, want)
		}
	}
	// A read of something not prefetched still reads, at the revision
	// the Prefetch fixed.
	other := c.NewStore(t, etcdkv.Options{Prefix: prefix})
	set := func(k, v string) {
		t.Helper()
		if err := other.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(k), []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	err = s.View(ctx, func(tx kv.Txn) error {
		if err := tx.(kv.Prefetcher).Prefetch([][]byte{[]byte("k")}, []kv.IterRange{{Prefix: []byte("q/")}}); err != nil {
			return err
		}
		set("other", "new")
		set("q/2", "new")
		if v, err := tx.Get([]byte("other")); err != nil || string(v) != "vother" {
			return fmt.Errorf("other = %q, %v after another client's commit, want the Prefetch's snapshot (vother)", v, err)
		}
		if ok, err := tx.Has([]byte("missing")); err != nil || ok {
			return fmt.Errorf("Has(missing) = %v, %v", ok, err)
		}
		n := 0
		err := tx.Iterate([]byte("q/"), nil, false, func(k, v []byte) (bool, error) { n++; return true, nil })
		if err == nil && n != 2 {
			err = fmt.Errorf("Iterate of q/ passed %d keys, want the 2 of the Prefetch's snapshot", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// In an Update, a prefetched read conflicts like any read: the
	// Update retries and reads the other commit.
	attempts := 0
	var got string
	err = s.Update(ctx, func(tx kv.Txn) error {
		attempts++
		if err := tx.(kv.Prefetcher).Prefetch([][]byte{[]byte("k")}, nil); err != nil {
			return err
		}
		v, err := tx.Get([]byte("k"))
		if err != nil {
			return err
		}
		got = string(v)
		if attempts == 1 {
			set("k", "new")
		}
		return tx.Set([]byte("k2"), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || got != "new" {
		t.Fatalf("Update: %d attempts, read k = %q; want 2 attempts, the second reading new", attempts, got)
	}
}

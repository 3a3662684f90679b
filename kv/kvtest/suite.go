package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// Opener returns a fresh, empty store for one test. It registers the
// store's Close with t.Cleanup; the suite may close the store itself first,
// so a second Close must not panic.
type Opener func(t *testing.T) kv.Store

// Cases lists the suite's cases by name, each run on a fresh store.
var Cases = []struct {
	Name string
	Fn   func(t *testing.T, s kv.Store)
}{
	{"PointOps", testPointOps},
	{"CallerOwnsBuffers", testCallerOwnsBuffers},
	{"LargeValue", testLargeValue},
	{"ReadYourWrites", testReadYourWrites},
	{"IterateOrder", testIterateOrder},
	{"IteratePrefixBounds", testIteratePrefixBounds},
	{"IterateStartStopError", testIterateStartStopError},
	{"IterateMany", testIterateMany},
	{"ReadOnly", testReadOnly},
	{"AbortOnError", testAbortOnError},
	{"ViewIsSnapshot", testViewIsSnapshot},
	{"NewSnapshot", testNewSnapshot},
	{"LostUpdates", testLostUpdates},
	{"ReadConflicts", testReadConflicts},
	{"RetryDropsWrites", testRetryDropsWrites},
	{"BlindWritesDoNotConflict", testBlindWrites},
	{"TxnTooBig", testTxnTooBig},
	{"Limits", testLimits},
	{"ContextCanceled", testContextCanceled},
	{"Sync", testSync},
	{"SizeCompactReclaim", testSizeCompact},
	{"Closed", testClosed},
}

// RunSuite runs every case of Cases on stores from open.
func RunSuite(t *testing.T, open Opener) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) { c.Fn(t, open(t)) })
	}
}

var bg = context.Background()

func b(s string) []byte { return []byte(s) }

// set commits key=value pairs given as alternating strings.
func set(t *testing.T, s kv.Store, kvs ...string) {
	t.Helper()
	err := s.Update(bg, func(tx kv.Txn) error {
		for i := 0; i < len(kvs); i += 2 {
			if err := tx.Set(b(kvs[i]), b(kvs[i+1])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update setting %q: %v", kvs, err)
	}
}

// get reads key in a fresh View; "" with ok false if it is absent.
func get(t *testing.T, s kv.Store, key string) (string, bool) {
	t.Helper()
	var v []byte
	var found bool
	err := s.View(bg, func(tx kv.Txn) error {
		var err error
		v, err = tx.Get(b(key))
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		t.Fatalf("View reading %q: %v", key, err)
	}
	return string(v), found
}

func wantValue(t *testing.T, s kv.Store, key, want string) {
	t.Helper()
	if v, ok := get(t, s, key); !ok || v != want {
		t.Errorf("%q = %q (present %v), want %q", key, v, ok, want)
	}
}

func wantAbsent(t *testing.T, s kv.Store, key string) {
	t.Helper()
	if v, ok := get(t, s, key); ok {
		t.Errorf("%q = %q, want it absent", key, v)
	}
}

// keys lists the keys Iterate passes, as strings.
func keys(t *testing.T, tx kv.Txn, prefix, start []byte) []string {
	t.Helper()
	var ks []string
	err := tx.Iterate(prefix, start, true, func(k, v []byte) (bool, error) {
		if v != nil {
			t.Errorf("keysOnly iteration passed value %q for %q", v, k)
		}
		ks = append(ks, string(k))
		return true, nil
	})
	if err != nil {
		t.Fatalf("Iterate(%q, %q): %v", prefix, start, err)
	}
	return ks
}

func viewKeys(t *testing.T, s kv.Store, prefix, start []byte) []string {
	t.Helper()
	var ks []string
	if err := s.View(bg, func(tx kv.Txn) error { ks = keys(t, tx, prefix, start); return nil }); err != nil {
		t.Fatal(err)
	}
	return ks
}

func testPointOps(t *testing.T, s kv.Store) {
	wantAbsent(t, s, "a")
	set(t, s, "a", "1", "b", "")
	wantValue(t, s, "a", "1")
	wantValue(t, s, "b", "") // an empty value is a value
	err := s.View(bg, func(tx kv.Txn) error {
		for _, c := range []struct {
			key  string
			want bool
		}{{"a", true}, {"b", true}, {"c", false}} {
			ok, err := tx.Has(b(c.key))
			if err != nil || ok != c.want {
				t.Errorf("Has(%q) = %v, %v; want %v", c.key, ok, err, c.want)
			}
		}
		var got []byte
		if err := tx.GetFunc(b("a"), func(v []byte) error { got = append(got, v...); return nil }); err != nil || string(got) != "1" {
			t.Errorf("GetFunc(a) = %q, %v", got, err)
		}
		boom := errors.New("boom")
		if err := tx.GetFunc(b("a"), func([]byte) error { return boom }); !errors.Is(err, boom) {
			t.Errorf("GetFunc passing on fn's error: %v", err)
		}
		if err := tx.GetFunc(b("c"), func([]byte) error { t.Error("GetFunc called fn for a missing key"); return nil }); !errors.Is(err, kv.ErrNotFound) {
			t.Errorf("GetFunc(missing) = %v, want ErrNotFound", err)
		}
		if _, err := tx.Get(b("c")); !errors.Is(err, kv.ErrNotFound) {
			t.Errorf("Get(missing) = %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Overwrite, delete, delete of a missing key.
	err = s.Update(bg, func(tx kv.Txn) error {
		if err := tx.Set(b("a"), b("2")); err != nil {
			return err
		}
		if err := tx.Delete(b("b")); err != nil {
			return err
		}
		return tx.Delete(b("never-set"))
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, "a", "2")
	wantAbsent(t, s, "b")
	// Binary keys and values, including zero and 0xff bytes.
	k, v := string([]byte{0, 0xff, 1}), string([]byte{0xff, 0, 0})
	set(t, s, k, v)
	wantValue(t, s, k, v)
}

func testCallerOwnsBuffers(t *testing.T, s kv.Store) {
	key, val := b("key1"), b("val1")
	err := s.Update(bg, func(tx kv.Txn) error {
		if err := tx.Set(key, val); err != nil {
			return err
		}
		// The caller may reuse its buffers once Set returns.
		key[3], val[3] = '2', '2'
		return tx.Set(key, val)
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, "key1", "val1")
	wantValue(t, s, "key2", "val2")
	// A value read with Get may be kept after the transaction (Get copies).
	var kept []byte
	s.View(bg, func(tx kv.Txn) error { kept, err = tx.Get(b("key1")); return err })
	set(t, s, "key1", "new!")
	if string(kept) != "val1" {
		t.Errorf("value returned by Get changed to %q after its transaction", kept)
	}
}

func testLargeValue(t *testing.T, s kv.Store) {
	big := make([]byte, 512<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := s.Update(bg, func(tx kv.Txn) error { return tx.Set(b("big"), big) }); err != nil {
		t.Fatalf("Update with a 512 KiB value: %v", err)
	}
	err := s.View(bg, func(tx kv.Txn) error {
		v, err := tx.Get(b("big"))
		if err != nil || !bytes.Equal(v, big) {
			t.Errorf("512 KiB value read back as %d bytes (equal %v), %v", len(v), bytes.Equal(v, big), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testReadYourWrites(t *testing.T, s kv.Store) {
	set(t, s, "p/a", "1", "p/c", "3", "p/e", "5")
	err := s.Update(bg, func(tx kv.Txn) error {
		if err := tx.Set(b("p/b"), b("2")); err != nil {
			return err
		}
		if err := tx.Set(b("p/c"), b("33")); err != nil {
			return err
		}
		if err := tx.Delete(b("p/e")); err != nil {
			return err
		}
		if v, err := tx.Get(b("p/b")); err != nil || string(v) != "2" {
			t.Errorf("Get of a key set in the same transaction: %q, %v", v, err)
		}
		if v, err := tx.Get(b("p/c")); err != nil || string(v) != "33" {
			t.Errorf("Get of a key overwritten in the same transaction: %q, %v", v, err)
		}
		if _, err := tx.Get(b("p/e")); !errors.Is(err, kv.ErrNotFound) {
			t.Errorf("Get of a key deleted in the same transaction: %v", err)
		}
		if ok, err := tx.Has(b("p/e")); ok || err != nil {
			t.Errorf("Has of a key deleted in the same transaction: %v, %v", ok, err)
		}
		var got []string
		err := tx.Iterate(b("p/"), nil, false, func(k, v []byte) (bool, error) {
			got = append(got, string(k)+"="+string(v))
			return true, nil
		})
		if want := []string{"p/a=1", "p/b=2", "p/c=33"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("Iterate in a transaction with writes = %q, %v; want %q", got, err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := viewKeys(t, s, b("p/"), nil), []string{"p/a", "p/b", "p/c"}; !slices.Equal(got, want) {
		t.Errorf("after commit: %q, want %q", got, want)
	}
}

func testIterateOrder(t *testing.T, s kv.Store) {
	// Bytewise order: shorter before longer, 0x00 and 0xff bytes unsigned.
	want := []string{"k", "k\x00", "k\x00\x00", "k\x01", "ka", "kb", "kb\xff", "k\x7f", "k\x80", "k\xff", "k\xff\xff"}
	slices.Sort(want) // Go's string order is bytewise
	shuffled := slices.Clone(want)
	for i := range shuffled {
		j := (i * 7) % len(shuffled)
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	var kvs []string
	for _, k := range shuffled {
		kvs = append(kvs, k, "v"+k)
	}
	set(t, s, kvs...)
	if got := viewKeys(t, s, b("k"), nil); !slices.Equal(got, want) {
		t.Errorf("Iterate order %q, want %q", got, want)
	}
	err := s.View(bg, func(tx kv.Txn) error {
		var n int
		return tx.Iterate(b("k"), nil, false, func(k, v []byte) (bool, error) {
			if string(v) != "v"+string(k) {
				t.Errorf("Iterate passed %q=%q", k, v)
			}
			n++
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testIteratePrefixBounds(t *testing.T, s kv.Store) {
	set(t, s, "o", "", "p", "", "p/", "", "p/a", "", "p/z\xff", "", "p0", "", "p\xff", "", "q", "", "\xff\xff", "")
	for _, c := range []struct {
		prefix, start string
		want          []string
	}{
		{"p/", "", []string{"p/", "p/a", "p/z\xff"}},
		{"p", "", []string{"p", "p/", "p/a", "p/z\xff", "p0", "p\xff"}},
		{"p/", "p/b", []string{"p/z\xff"}},
		{"p/", "p/a", []string{"p/a", "p/z\xff"}},
		{"p/", "p0", nil}, // start after the prefix
		{"p/", "o", []string{"p/", "p/a", "p/z\xff"}}, // start before the prefix
		{"\xff", "", []string{"\xff\xff"}},
		{"zz", "", nil},
		{"", "", []string{"o", "p", "p/", "p/a", "p/z\xff", "p0", "p\xff", "q", "\xff\xff"}},
		{"", "p0", []string{"p0", "p\xff", "q", "\xff\xff"}},
	} {
		var start []byte
		if c.start != "" {
			start = b(c.start)
		}
		if got := viewKeys(t, s, b(c.prefix), start); !slices.Equal(got, c.want) {
			t.Errorf("Iterate(prefix %q, start %q) = %q, want %q", c.prefix, c.start, got, c.want)
		}
	}
}

func testIterateStartStopError(t *testing.T, s kv.Store) {
	set(t, s, "p/1", "a", "p/2", "b", "p/3", "c", "p/4", "d")
	err := s.View(bg, func(tx kv.Txn) error {
		var got []string
		err := tx.Iterate(b("p/"), b("p/2"), false, func(k, v []byte) (bool, error) {
			got = append(got, string(k)+"="+string(v))
			return len(got) < 2, nil
		})
		if want := []string{"p/2=b", "p/3=c"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("Iterate from p/2 stopping after two = %q, %v; want %q", got, err, want)
		}
		boom := errors.New("boom")
		n := 0
		err = tx.Iterate(b("p/"), nil, false, func(k, v []byte) (bool, error) { n++; return true, boom })
		if !errors.Is(err, boom) || n != 1 {
			t.Errorf("Iterate with fn failing: %v after %d calls; want boom after 1", err, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testIterateMany(t *testing.T, s kv.Store) {
	const n = 1000
	for i := 0; i < n; i += 100 {
		err := s.Update(bg, func(tx kv.Txn) error {
			for j := i; j < i+100; j++ {
				if err := tx.Set(fmt.Appendf(nil, "m/%05d", j), fmt.Appendf(nil, "%d", j)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err := s.View(bg, func(tx kv.Txn) error {
		i := 0
		err := tx.Iterate(b("m/"), nil, false, func(k, v []byte) (bool, error) {
			if want := fmt.Sprintf("m/%05d", i); string(k) != want || string(v) != fmt.Sprint(i) {
				return false, fmt.Errorf("entry %d is %q=%q, want %q", i, k, v, want)
			}
			i++
			return true, nil
		})
		if err == nil && i != n {
			err = fmt.Errorf("iterated %d keys, want %d", i, n)
		}
		if err != nil {
			return err
		}
		if got := keys(t, tx, b("m/"), b("m/00777")); len(got) != n-777 || got[0] != "m/00777" {
			t.Errorf("Iterate from m/00777: %d keys starting at %q", len(got), got[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testReadOnly(t *testing.T, s kv.Store) {
	set(t, s, "a", "1")
	err := s.View(bg, func(tx kv.Txn) error {
		if err := tx.Set(b("a"), b("2")); !errors.Is(err, kv.ErrReadOnly) {
			t.Errorf("Set in View = %v, want ErrReadOnly", err)
		}
		if err := tx.Delete(b("a")); !errors.Is(err, kv.ErrReadOnly) {
			t.Errorf("Delete in View = %v, want ErrReadOnly", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	snap := s.NewSnapshot()
	if err := snap.Set(b("a"), b("3")); !errors.Is(err, kv.ErrReadOnly) {
		t.Errorf("Set in a Snapshot = %v, want ErrReadOnly", err)
	}
	if err := snap.Delete(b("a")); !errors.Is(err, kv.ErrReadOnly) {
		t.Errorf("Delete in a Snapshot = %v, want ErrReadOnly", err)
	}
	snap.Discard()
	wantValue(t, s, "a", "1")
}

func testAbortOnError(t *testing.T, s kv.Store) {
	set(t, s, "a", "1")
	boom := errors.New("boom")
	err := s.Update(bg, func(tx kv.Txn) error {
		tx.Set(b("a"), b("2"))
		tx.Set(b("b"), b("2"))
		tx.Delete(b("a"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	wantValue(t, s, "a", "1")
	wantAbsent(t, s, "b")
	// A View passes fn's error on too.
	if err := s.View(bg, func(kv.Txn) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("View returned %v, want fn's error", err)
	}
}

func testViewIsSnapshot(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "p/1", "")
	calls := 0
	err := s.View(bg, func(tx kv.Txn) error {
		calls++
		// Read (a store may fix the snapshot at the first read), commit
		// changes after it, then read again.
		if v, err := tx.Get(b("a")); err != nil || string(v) != "1" {
			t.Errorf("View's first read: a = %q, %v", v, err)
		}
		set(t, s, "a", "2", "p/2", "")
		set(t, s, "b", "new")
		err := s.Update(bg, func(tx kv.Txn) error { return tx.Delete(b("p/1")) })
		if err != nil {
			return err
		}
		if v, err := tx.Get(b("a")); err != nil || string(v) != "1" {
			t.Errorf("View saw a later commit: a = %q, %v", v, err)
		}
		if ok, err := tx.Has(b("b")); ok || err != nil {
			t.Errorf("View saw a key created later: %v, %v", ok, err)
		}
		if got, want := keys(t, tx, b("p/"), nil), []string{"p/1"}; !slices.Equal(got, want) {
			t.Errorf("View iterating saw later commits: %q, want %q", got, want)
		}
		return nil
	})
	if err != nil || calls != 1 {
		t.Fatalf("View: %v after %d calls of fn", err, calls)
	}
	// A View started after the commits sees them all.
	wantValue(t, s, "a", "2")
	wantValue(t, s, "b", "new")
	if got, want := viewKeys(t, s, b("p/"), nil), []string{"p/2"}; !slices.Equal(got, want) {
		t.Errorf("later View iterates %q, want %q", got, want)
	}
}

func testNewSnapshot(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "p/1", "x")
	snap := s.NewSnapshot()
	defer snap.Discard()
	set(t, s, "a", "2", "p/2", "y")
	if err := s.Update(bg, func(tx kv.Txn) error { return tx.Delete(b("p/1")) }); err != nil {
		t.Fatal(err)
	}
	if v, err := snap.Get(b("a")); err != nil || string(v) != "1" {
		t.Errorf("snapshot Get(a) = %q, %v; want 1", v, err)
	}
	if ok, err := snap.Has(b("p/1")); !ok || err != nil {
		t.Errorf("snapshot saw a later delete: %v, %v", ok, err)
	}
	if got, want := keys(t, snap, b("p/"), nil), []string{"p/1"}; !slices.Equal(got, want) {
		t.Errorf("snapshot iterates %q, want %q", got, want)
	}
	if got, want := viewKeys(t, s, b("p/"), nil), []string{"p/2"}; !slices.Equal(got, want) {
		t.Errorf("store iterates %q, want %q", got, want)
	}
}

func getCounter(tx kv.Txn, key string) (int, error) {
	v, err := tx.Get(b(key))
	if errors.Is(err, kv.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(string(v), &n)
	return n, err
}

func testLostUpdates(t *testing.T, s kv.Store) {
	const goroutines, each = 4, 20
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := s.Update(bg, func(tx kv.Txn) error {
					n, err := getCounter(tx, "ctr")
					if err != nil {
						return err
					}
					return tx.Set(b("ctr"), fmt.Appendf(nil, "%d", n+1))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	wantValue(t, s, "ctr", fmt.Sprint(goroutines*each))
}

// testReadConflicts: a transaction whose reads were changed by a commit
// after it started is retried from scratch, for every way of reading.
func testReadConflicts(t *testing.T, s kv.Store) {
	for _, c := range []struct {
		name  string
		setup []string                        // committed before
		read  func(tx kv.Txn) (string, error) // what the transaction reads
		other func(tx kv.Txn) error           // committed during the first attempt
	}{
		{"Get", []string{"a", "1"},
			func(tx kv.Txn) (string, error) { v, err := tx.Get(b("a")); return string(v), err },
			func(tx kv.Txn) error { return tx.Set(b("a"), b("2")) }},
		{"GetMissing", nil,
			func(tx kv.Txn) (string, error) {
				v, err := tx.Get(b("a"))
				if errors.Is(err, kv.ErrNotFound) {
					return "none", nil
				}
				return string(v), err
			},
			func(tx kv.Txn) error { return tx.Set(b("a"), b("2")) }},
		{"GetFunc", []string{"a", "1"},
			func(tx kv.Txn) (r string, err error) {
				err = tx.GetFunc(b("a"), func(v []byte) error { r = string(v); return nil })
				return r, err
			},
			func(tx kv.Txn) error { return tx.Set(b("a"), b("2")) }},
		{"HasDeleted", []string{"a", "1"},
			func(tx kv.Txn) (string, error) { ok, err := tx.Has(b("a")); return fmt.Sprint(ok), err },
			func(tx kv.Txn) error { return tx.Delete(b("a")) }},
		{"IterateChanged", []string{"p/1", "x", "p/2", "y"},
			func(tx kv.Txn) (string, error) { return iterString(tx, false) },
			func(tx kv.Txn) error { return tx.Set(b("p/2"), b("z")) }},
		{"IterateDeleted", []string{"p/1", "x", "p/2", "y"},
			func(tx kv.Txn) (string, error) { return iterString(tx, true) },
			func(tx kv.Txn) error { return tx.Delete(b("p/1")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Clean slate for each case.
			err := s.Update(bg, func(tx kv.Txn) error {
				for _, k := range []string{"a", "p/1", "p/2", "out"} {
					if err := tx.Delete(b(k)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.setup) > 0 {
				set(t, s, c.setup...)
			}
			var reads []string
			attempts := 0
			err = s.Update(bg, func(tx kv.Txn) error {
				attempts++
				r, err := c.read(tx)
				if err != nil {
					return err
				}
				reads = append(reads, r)
				if attempts == 1 {
					if err := s.Update(bg, c.other); err != nil {
						return fmt.Errorf("concurrent Update: %w", err)
					}
				}
				return tx.Set(b("out"), b(r))
			})
			if err != nil {
				t.Fatal(err)
			}
			if attempts != 2 || reads[0] == reads[1] {
				t.Fatalf("a read changed by a concurrent commit ran %d attempts reading %q; want a retry that reads the new state", attempts, reads)
			}
			wantValue(t, s, "out", reads[1])
		})
	}
}

func iterString(tx kv.Txn, keysOnly bool) (string, error) {
	var out []string
	err := tx.Iterate(b("p/"), nil, keysOnly, func(k, v []byte) (bool, error) {
		out = append(out, string(k)+"="+string(v))
		return true, nil
	})
	return fmt.Sprint(out), err
}

// testRetryDropsWrites: the writes of an attempt that conflicted are gone
// when fn runs again.
func testRetryDropsWrites(t *testing.T, s kv.Store) {
	set(t, s, "a", "1")
	attempts := 0
	err := s.Update(bg, func(tx kv.Txn) error {
		attempts++
		if _, err := tx.Get(b("a")); err != nil {
			return err
		}
		if attempts == 1 {
			if err := tx.Set(b("first-only"), b("x")); err != nil {
				return err
			}
			set(t, s, "a", "2")
		}
		if _, err := tx.Get(b("first-only")); attempts > 1 && !errors.Is(err, kv.ErrNotFound) {
			t.Errorf("attempt %d sees a write of the previous attempt: %v", attempts, err)
		}
		return tx.Set(b("b"), fmt.Appendf(nil, "%d", attempts))
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("%d attempts, want 2", attempts)
	}
	wantAbsent(t, s, "first-only")
	wantValue(t, s, "b", "2")
}

// testBlindWrites: transactions that only write do not conflict; the
// last commit wins.
func testBlindWrites(t *testing.T, s kv.Store) {
	attempts := 0
	err := s.Update(bg, func(tx kv.Txn) error {
		attempts++
		if attempts == 1 {
			set(t, s, "a", "other")
		}
		return tx.Set(b("a"), b("mine"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("a write-only transaction ran %d times", attempts)
	}
	wantValue(t, s, "a", "mine")
}

// testTxnTooBig: a transaction larger than the store allows fails with
// ErrTxnTooBig, writes nothing, and leaves the store usable.
func testTxnTooBig(t *testing.T, s kv.Store) {
	// Small entries: a store keeping large values apart (Badger's value
	// log) takes transactions of any total size, but not of any count.
	val := make([]byte, 100)
	const limit = 10 << 20 // no store should take 10 million entries
	n := 0
	err := s.Update(bg, func(tx kv.Txn) error {
		for i := 0; i < limit; i++ {
			if err := tx.Set(fmt.Appendf(nil, "big/%08d", i), val); err != nil {
				return err
			}
			n = i + 1
		}
		return nil
	})
	if !errors.Is(err, kv.ErrTxnTooBig) {
		t.Fatalf("Update writing %d values of 100 bytes: %v, want ErrTxnTooBig", n, err)
	}
	if got := viewKeys(t, s, b("big/"), nil); len(got) != 0 {
		t.Errorf("a transaction that was too big stored %d keys", len(got))
	}
	set(t, s, "after", "ok")
	wantValue(t, s, "after", "ok")
}

// testLimits: an Update exactly at each bound of Limits commits, and one
// past it fails with ErrTxnTooBig and stores nothing, so code that sizes
// its batches by Limits neither fails nor wastes the store's capacity.
func testLimits(t *testing.T, s kv.Store) {
	l := s.Limits()
	t.Logf("Limits: %+v", l)
	if l.Writes < 1 || l.Reads < 1 || l.Bytes < 1 || l.OpBytes < 0 {
		t.Fatalf("Limits %+v: every bound must be positive", l)
	}
	key := func(p string, i int) []byte { return fmt.Appendf(nil, "%s/%08d", p, i) }
	klen := len(key("w0", 0))
	// write sets n keys under p with values of the given sizes.
	write := func(p string, sizes []int) error {
		return s.Update(bg, func(tx kv.Txn) error {
			for i, n := range sizes {
				if err := tx.Set(key(p, i), make([]byte, n)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	stored := func(p string) int { return len(viewKeys(t, s, b(p+"/"), nil)) }

	// Writes: Limits.Writes empty values commit, one more does not.
	if need := l.Writes * (klen + l.OpBytes); need > l.Bytes {
		t.Fatalf("Limits %+v: %d writes of %d-byte keys need %d bytes, more than Bytes", l, l.Writes, klen, need)
	}
	if err := write("w0", make([]int, l.Writes)); err != nil {
		t.Fatalf("Update of Limits.Writes (%d) writes: %v", l.Writes, err)
	}
	if got := stored("w0"); got != l.Writes {
		t.Fatalf("stored %d keys of %d", got, l.Writes)
	}
	if err := write("w1", make([]int, l.Writes+1)); !errors.Is(err, kv.ErrTxnTooBig) {
		t.Fatalf("Update of Limits.Writes+1 (%d) writes: %v, want ErrTxnTooBig", l.Writes+1, err)
	}
	if got := stored("w1"); got != 0 {
		t.Fatalf("an Update past Limits.Writes stored %d keys", got)
	}

	// Bytes: values of about 100 bytes (small enough that every store
	// counts them whole) summing with keys and OpBytes to exactly
	// Limits.Bytes commit; one byte more does not.
	n := min(l.Writes, (l.Bytes+klen+100+l.OpBytes-1)/(klen+100+l.OpBytes))
	data := l.Bytes - n*(klen+l.OpBytes)
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = data / n
		if i < data%n {
			sizes[i]++
		}
	}
	if err := write("b0", sizes); err != nil {
		t.Fatalf("Update of %d writes of %d bytes in all (Limits.Bytes): %v", n, l.Bytes, err)
	}
	if got := stored("b0"); got != n {
		t.Fatalf("stored %d keys of %d", got, n)
	}
	sizes[n-1]++
	if err := write("b1", sizes); !errors.Is(err, kv.ErrTxnTooBig) {
		t.Fatalf("Update of %d writes of %d bytes in all (Limits.Bytes+1): %v, want ErrTxnTooBig", n, l.Bytes+1, err)
	}
	if got := stored("b1"); got != 0 {
		t.Fatalf("an Update past Limits.Bytes stored %d keys", got)
	}

	// Reads, where a store bounds them: Limits.Reads keys read and one
	// write commit; one read more does not.
	if l.Reads >= 1<<20 {
		return // not bounded
	}
	read := func(reads int) error {
		return s.Update(bg, func(tx kv.Txn) error {
			for i := range reads {
				if _, err := tx.Has(key("r", i)); err != nil {
					return err
				}
			}
			return tx.Set(b("r-written"), b("x"))
		})
	}
	if err := read(l.Reads); err != nil {
		t.Fatalf("Update reading Limits.Reads (%d) keys: %v", l.Reads, err)
	}
	if err := s.Update(bg, func(tx kv.Txn) error { return tx.Delete(b("r-written")) }); err != nil {
		t.Fatal(err)
	}
	if err := read(l.Reads + 1); !errors.Is(err, kv.ErrTxnTooBig) {
		t.Fatalf("Update reading Limits.Reads+1 (%d) keys: %v, want ErrTxnTooBig", l.Reads+1, err)
	}
	wantAbsent(t, s, "r-written")
}

func testContextCanceled(t *testing.T, s kv.Store) {
	set(t, s, "a", "1")
	ctx, cancel := context.WithCancel(bg)
	cancel()
	called := false
	if err := s.View(ctx, func(kv.Txn) error { called = true; return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("View with a canceled context = %v, want context.Canceled", err)
	}
	err := s.Update(ctx, func(tx kv.Txn) error { called = true; return tx.Set(b("a"), b("2")) })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a canceled context = %v, want context.Canceled", err)
	}
	if called {
		t.Error("fn ran under a canceled context")
	}
	if err := s.Sync(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Sync with a canceled context = %v, want context.Canceled", err)
	}
	wantValue(t, s, "a", "1")
	// An Update whose context is canceled while it retries stops retrying.
	ctx, cancel = context.WithCancel(bg)
	attempts := 0
	err = s.Update(ctx, func(tx kv.Txn) error {
		attempts++
		if _, err := tx.Get(b("a")); err != nil {
			return err
		}
		set(t, s, "a", fmt.Sprint(attempts)) // conflict on every attempt
		if attempts == 3 {
			cancel()
		}
		return tx.Set(b("a"), b("mine"))
	})
	cancel()
	if !errors.Is(err, context.Canceled) || attempts != 3 {
		t.Errorf("Update canceled during its third attempt: %v after %d attempts, want context.Canceled after 3", err, attempts)
	}
	wantValue(t, s, "a", "3")
}

func testSync(t *testing.T, s kv.Store) {
	if err := s.Sync(bg); err != nil {
		t.Fatalf("Sync of an empty store: %v", err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				err := s.Update(bg, func(tx kv.Txn) error { return tx.Set(fmt.Appendf(nil, "s/%d/%d", g, i), b("v")) })
				if err == nil {
					err = s.Sync(bg)
				}
				if err != nil {
					failed.Add(1)
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if got := viewKeys(t, s, b("s/"), nil); len(got) != 20 {
		t.Errorf("%d keys after concurrent Update+Sync, want 20", len(got))
	}
}

func testSizeCompact(t *testing.T, s kv.Store) {
	set(t, s, "a", "1")
	if n, err := s.Size(); err != nil || n < 0 {
		t.Errorf("Size = %d, %v", n, err)
	}
	if err := s.Compact(bg); err != nil {
		t.Errorf("Compact: %v", err)
	}
	set(t, s, "b", "2")
	if err := s.Update(bg, func(tx kv.Txn) error { return tx.Delete(b("b")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReclaimSpace(bg); err != nil {
		t.Errorf("ReclaimSpace: %v", err)
	}
	wantValue(t, s, "a", "1")
	wantAbsent(t, s, "b")
	set(t, s, "c", "3")
	wantValue(t, s, "c", "3")
}

func testClosed(t *testing.T, s kv.Store) {
	set(t, s, "a", "1")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.View(bg, func(tx kv.Txn) error { _, err := tx.Get(b("a")); return err }); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("View after Close = %v, want ErrClosed", err)
	}
	if err := s.Update(bg, func(tx kv.Txn) error { return tx.Set(b("a"), b("2")) }); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Update after Close = %v, want ErrClosed", err)
	}
	if err := s.Sync(bg); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Sync after Close = %v, want ErrClosed", err)
	}
	if err := s.Compact(bg); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Compact after Close = %v, want ErrClosed", err)
	}
	if _, err := s.ReclaimSpace(bg); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("ReclaimSpace after Close = %v, want ErrClosed", err)
	}
	snap := s.NewSnapshot()
	if _, err := snap.Get(b("a")); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Get in a Snapshot taken after Close = %v, want ErrClosed", err)
	}
	snap.Discard()
	if err := s.Close(); err != nil && !errors.Is(err, kv.ErrClosed) {
		t.Errorf("second Close = %v, want nil or ErrClosed", err)
	}
}

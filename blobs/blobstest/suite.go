// Package blobstest is the conformance suite of the blobs.Store contract:
// every implementation (S3, the cache in front of another store, Mem)
// passes the same cases.
package blobstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
)

// Opener returns a fresh, empty store for one case; the suite closes it
// (a second Close must be harmless).
type Opener func(t *testing.T) blobs.Store

// RunSuite runs every case on stores from open.
func RunSuite(t *testing.T, open Opener) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, blobs.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Absent", testAbsent},
		{"WrongKey", testWrongKey},
		{"DeleteList", testDeleteList},
		{"ListSizes", testListSizes},
		{"CallerOwnsBuffers", testCallerOwnsBuffers},
		{"Canceled", testCanceled},
		{"Closed", testClosed},
		{"Create", testCreate},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			defer s.Close()
			c.fn(t, s)
		})
	}
}

var bg = context.Background()

// blob returns n bytes that differ for each i, and their key.
func blob(i, n int) (blobs.Key, []byte) {
	seed := fmt.Appendf(nil, "blobstest %d;", i)
	data := bytes.Repeat(seed, n/len(seed)+1)[:n]
	return blobs.Sum(data), data
}

func put(t *testing.T, s blobs.Store, i, n int) (blobs.Key, []byte) {
	t.Helper()
	k, data := blob(i, n)
	if err := s.Put(bg, k, data); err != nil {
		t.Fatalf("Put of %d bytes: %v", n, err)
	}
	return k, data
}

func keys(t *testing.T, s blobs.Store) []string {
	t.Helper()
	var ks []string
	if err := s.List(bg, func(k blobs.Key) error { ks = append(ks, k.String()); return nil }); err != nil {
		t.Fatalf("List: %v", err)
	}
	slices.Sort(ks)
	return ks
}

func testRoundTrip(t *testing.T, s blobs.Store) {
	for i, n := range []int{0, 1, 4 << 10, 40 << 10, 1 << 20} {
		k, data := put(t, s, i, n)
		got, err := s.Get(bg, k)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get of a %d-byte blob: %d bytes, %v", n, len(got), err)
		}
		if ok, err := s.Has(bg, k); !ok || err != nil {
			t.Fatalf("Has of a stored blob: %v, %v", ok, err)
		}
		// Storing a key again is harmless.
		if err := s.Put(bg, k, data); err != nil {
			t.Fatalf("Put again: %v", err)
		}
	}
}

// testCreate: a Creator stores a blob it lacks and reports it, reports a
// blob it holds (stored by Put or by Create) without changing it, and
// refuses content under another content's key.
func testCreate(t *testing.T, s blobs.Store) {
	cr, ok := s.(blobs.Creator)
	if !ok {
		t.Fatalf("%T is no blobs.Creator", s)
	}
	k, data := blob(7, 40<<10)
	if stored, err := cr.Create(bg, k, data); !stored || err != nil {
		t.Fatalf("Create of an absent blob: stored %v, %v", stored, err)
	}
	if got, err := s.Get(bg, k); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after Create: %d bytes, %v", len(got), err)
	}
	if stored, err := cr.Create(bg, k, data); stored || err != nil {
		t.Fatalf("Create of a blob Create stored: stored %v, %v; want false, nil", stored, err)
	}
	k2, data2 := put(t, s, 8, 100)
	if stored, err := cr.Create(bg, k2, data2); stored || err != nil {
		t.Fatalf("Create of a blob Put stored: stored %v, %v; want false, nil", stored, err)
	}
	k3, _ := blob(9, 100)
	if _, err := cr.Create(bg, k3, data2); !errors.Is(err, blobs.ErrCorrupt) {
		t.Fatalf("Create under another content's key: %v, want ErrCorrupt", err)
	}
	if ks := keys(t, s); len(ks) != 2 {
		t.Fatalf("the store lists %d blobs, want 2", len(ks))
	}
}

func testAbsent(t *testing.T, s blobs.Store) {
	k, _ := blob(1, 100)
	if _, err := s.Get(bg, k); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("Get of an absent key: %v, want ErrNotFound", err)
	}
	if ok, err := s.Has(bg, k); ok || err != nil {
		t.Fatalf("Has of an absent key: %v, %v", ok, err)
	}
	if err := s.Delete(bg, k); err != nil {
		t.Fatalf("Delete of an absent key: %v", err)
	}
	if ks := keys(t, s); len(ks) != 0 {
		t.Fatalf("an empty store lists %v", ks)
	}
}

func testWrongKey(t *testing.T, s blobs.Store) {
	k, _ := blob(1, 100)
	_, other := blob(2, 100)
	if err := s.Put(bg, k, other); !errors.Is(err, blobs.ErrCorrupt) {
		t.Fatalf("Put under another content's key: %v, want ErrCorrupt", err)
	}
	if ok, err := s.Has(bg, k); ok || err != nil {
		t.Fatalf("a refused Put stored something: %v, %v", ok, err)
	}
}

func testDeleteList(t *testing.T, s blobs.Store) {
	var want []string
	for i := range 10 {
		k, _ := put(t, s, i, 100+i)
		want = append(want, k.String())
	}
	slices.Sort(want)
	if got := keys(t, s); !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	k3, _ := blob(3, 103)
	if err := s.Delete(bg, k3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(bg, k3); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	want = slices.DeleteFunc(want, func(k string) bool { return k == k3.String() })
	if got := keys(t, s); !slices.Equal(got, want) {
		t.Fatalf("List after Delete = %v, want %v", got, want)
	}
	// An error of List's callback stops it and comes back unchanged.
	stop := errors.New("stop here")
	n := 0
	err := s.List(bg, func(blobs.Key) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("List whose callback fails: %v after %d calls, want the callback's error after 1", err, n)
	}
}

// testListSizes: a Sizer lists every blob with its size (a Store that is
// not one passes).
func testListSizes(t *testing.T, s blobs.Store) {
	sz, ok := s.(blobs.Sizer)
	if !ok {
		return
	}
	want := map[blobs.Key]int64{}
	for i := range 5 {
		k, d := put(t, s, i, 1000*i+1)
		want[k] = int64(len(d))
	}
	got := map[blobs.Key]int64{}
	if err := sz.ListSizes(bg, func(k blobs.Key, n int64) error { got[k] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("ListSizes = %v, want %v", got, want)
	}
}

func testCallerOwnsBuffers(t *testing.T, s blobs.Store) {
	k, data := blob(1, 4096)
	buf := bytes.Clone(data)
	if err := s.Put(bg, k, buf); err != nil {
		t.Fatal(err)
	}
	clear(buf) // the store must not keep the caller's slice
	got, err := s.Get(bg, k)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after the caller reused its buffer: %v", err)
	}
	clear(got) // nor hand out its own
	if got, err := s.Get(bg, k); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after the caller changed a returned slice: %v", err)
	}
}

func testCanceled(t *testing.T, s blobs.Store) {
	k, data := blob(1, 100)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := s.Put(ctx, k, data); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a canceled context: %v, want context.Canceled", err)
	}
}

func testClosed(t *testing.T, s blobs.Store) {
	k, data := put(t, s, 1, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"Put":    s.Put(bg, k, data),
		"Delete": s.Delete(bg, k),
		"List":   s.List(bg, func(blobs.Key) error { return nil }),
	} {
		if !errors.Is(err, blobs.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	if _, err := s.Get(bg, k); !errors.Is(err, blobs.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Has(bg, k); !errors.Is(err, blobs.ErrClosed) {
		t.Errorf("Has after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

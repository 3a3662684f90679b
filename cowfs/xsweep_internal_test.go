package cowfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestOverLeases runs the tests of TestOverBlobs again with
// Options.Leases set as well, so every path that stores content (writes,
// truncates, fold trims, merges, rechunks, chunked writes) and the sweep
// go through the handshake with other servers (xsweep.go). The lease here
// is a stand-in over the test's own store (testLeased): it never expires,
// and each commit's required intents are checked to exist.
func TestOverLeases(t *testing.T) {
	runContentSuite(t)
}

// overLeases names TestOverLeases, whose tests' stores get a blob store
// (testContent) and Options.Leases (testLeased).
const overLeases = "TestOverLeases/"

// testLeased returns st and opts as a test under TestOverLeases opens
// them: st's transactions check the intents they require, and
// opts.Leases commits over st.
func testLeased(t testing.TB, st kv.Store, opts Options) (kv.Store, Options) {
	if opts.Leases != nil || !strings.HasPrefix(t.Name(), overLeases) {
		return st, opts
	}
	opts.Leases = fakeLeased{st}
	return checkingKV{st}, opts
}

// fakeLeased is a kv.Leased over a kv.Store, whose lease (1) never
// expires: a condition is a read, so a conflicting commit meanwhile makes
// the Update run again.
type fakeLeased struct{ st kv.Store }

func (f fakeLeased) CommitLeased(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, bool, error) {
	var ok bool
	err := f.st.Update(ctx, func(tx kv.Txn) error {
		ok = false
		for _, c := range conds {
			if c.Prefix {
				found := false
				err := tx.Iterate(c.Key, nil, true, func([]byte, []byte) (bool, error) { found = true; return false, nil })
				if err != nil || found {
					return err
				}
				continue
			}
			v, err := tx.Get(c.Key)
			switch {
			case errors.Is(err, kv.ErrNotFound):
				if !c.Absent {
					return nil
				}
			case err != nil:
				return err
			case c.Absent || !bytes.Equal(v, c.Value):
				return nil
			}
		}
		for _, o := range ops {
			var err error
			if o.Delete {
				err = tx.Delete(o.Key)
			} else {
				err = tx.Set(o.Key, o.Value)
			}
			if err != nil {
				return err
			}
		}
		ok = true
		return nil
	})
	return 1, ok, err
}

func (fakeLeased) LeaseDeadline(context.Context, int64) (time.Time, error) {
	return time.Now().Add(time.Minute), nil
}

// checkingKV is a kv.Store whose read-write transactions implement
// kv.CommitChecker by checking, in a View, that the key exists (the
// stand-in lease never expires, so a missing intent is a bug).
type checkingKV struct{ kv.Store }

func (s checkingKV) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return s.Store.Update(ctx, func(tx kv.Txn) error { return fn(checkingTxn{tx, s.Store}) })
}

type checkingTxn struct {
	kv.Txn
	st kv.Store
}

func (t checkingTxn) RequireExists(key []byte) error {
	return t.st.View(context.Background(), func(tx kv.Txn) error {
		ok, err := tx.Has(key)
		if err == nil && !ok {
			err = fmt.Errorf("required key %x does not exist", key)
		}
		return err
	})
}

// TestIntentsConsumed: under a stand-in lease, a write and a truncate
// leave no intent and a record per content they stored; a sweep with
// nothing live then deletes that content, and leaves no record, intent or
// deletion marker.
func TestIntentsConsumed(t *testing.T) {
	ctx := context.Background()
	raw := kvtest.NewStore(t)
	c, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := checkingKV{raw}
	s, err := Open(ctx, st, Options{BlockSize: 4096, InlineMax: 64, Blobs: c, Leases: fakeLeased{raw}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.NewTree(ctx, 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := s.View([]LayerID{l})
	a, err := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 16*4096)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	size := uint64(len(data) - 1000) // the last block is stored again, trimmed
	if _, err := f.SetAttr(a.Ino, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
	count := func(kind byte) int {
		t.Helper()
		n := 0
		err := raw.View(ctx, func(tx kv.Txn) error {
			return tx.Iterate([]byte{pfxCross, kind}, nil, true, func([]byte, []byte) (bool, error) { n++; return true, nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	stored := len(storedContent(t, s))
	if n := count(kindIntent); n != 0 {
		t.Fatalf("%d intents left after the write and the truncate", n)
	}
	if n := count(kindRecord); n != stored || n == 0 {
		t.Fatalf("%d content records for %d stored contents", n, stored)
	}
	w, err := s.BeginSweep(func(*Txn) ([]LayerID, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	n, err := w.Run(ctx)
	w.End()
	if err != nil {
		t.Fatal(err)
	}
	if n != stored {
		t.Fatalf("the sweep went through %d contents, want %d", n, stored)
	}
	if left := len(storedContent(t, s)); left != 0 {
		t.Fatalf("%d contents left after a sweep with nothing live", left)
	}
	for _, k := range []byte{kindRecord, kindIntent, kindDelete} {
		if n := count(k); n != 0 {
			t.Fatalf("%d keys of kind %c left after the sweep", n, k)
		}
	}
}

// failDeletes is a blob store whose Delete fails after, perhaps, reaching
// the service.
type failDeletes struct{ blobs.Store }

func (failDeletes) Delete(context.Context, blobs.Key) error {
	return errors.New("connection reset after the request was sent (test)")
}

// TestDeletionMarkers: a deletion that failed keeps its marker (the
// request may still arrive), so a write of that content waits for it,
// and gives up with a clear error after markerWait; once the marker is
// gone the write goes on.
func TestDeletionMarkers(t *testing.T) {
	ctx := context.Background()
	raw := kvtest.NewStore(t)
	mem := blobs.NewMem()
	open := func(b blobs.Store) *Store {
		s, err := Open(ctx, checkingKV{raw}, Options{BlockSize: 4096, InlineMax: 64, Blobs: b, Leases: fakeLeased{raw}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(mem)
	l, err := s.NewTree(ctx, 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := s.View([]LayerID{l})
	a, err := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i * 13 % 251)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	// Nothing live: a sweep whose deletion fails.
	w, err := open(failDeletes{mem}).BeginSweep(func(*Txn) ([]LayerID, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Run(ctx)
	w.End()
	if err == nil {
		t.Fatal("a sweep whose deletion failed reported no error")
	}
	h := blobs.Sum(data)
	marker := crossKey(kindDelete, h[:])
	err = raw.View(ctx, func(tx kv.Txn) error {
		ok, err := tx.Has(marker)
		if err == nil && !ok {
			err = errors.New("the marker of a deletion that may still arrive was removed at once")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { markerWait = d }(markerWait)
	markerWait = 50 * time.Millisecond
	if _, err := f.WriteAt(a.Ino, data, 4096); err == nil {
		t.Fatal("a write of content marked for deletion went on")
	}
	if err := raw.Update(ctx, func(tx kv.Txn) error { return tx.Delete(marker) }); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, data, 4096); err != nil {
		t.Fatalf("a write once the marker is gone: %v", err)
	}
}

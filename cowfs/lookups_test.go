package cowfs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
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
	// Again: the top layer's record is cached (topcache.go).
	cs.reset()
	if _, err := f.GetAttr(a.Ino); err != nil {
		t.Fatal(err)
	}
	if txns, points := cs.txns.Load(), cs.points.Load(); txns != 1 || points != 0 {
		t.Fatalf("GetAttr of a top-layer inode again: %d transactions, %d point lookups; want 1, 0", txns, points)
	}
	// A change voids it.
	mode := uint32(0o600)
	if _, err := f.SetAttr(a.Ino, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	got, err := f.GetAttr(a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := f.GetAttrs([]InodeID{a.Ino, a.Ino, a.Ino, a.Ino})
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != 0o600 || attrs[0] == nil || attrs[3].Mode != 0o600 {
		t.Fatalf("after a chmod to 600: GetAttr mode %o, GetAttrs %v", got.Mode, attrs[0])
	}
}

// TestGetAttrFrozenCached checks that once an inode's frozen record is
// cached, and that the top layer holds none of it, its attributes cost
// no point lookup.
func TestGetAttrFrozenCached(t *testing.T) {
	f, cs, _ := newCountingFS(t, Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	pushLayer(t, f)
	if _, err := f.GetAttr(a.Ino); err != nil { // fills the cache
		t.Fatal(err)
	}
	cs.reset()
	got, err := f.GetAttr(a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != 0o644 {
		t.Fatalf("mode %o, want 644", got.Mode)
	}
	if txns, points := cs.txns.Load(), cs.points.Load(); txns != 1 || points != 0 {
		t.Fatalf("GetAttr of a cached frozen inode: %d transactions, %d point lookups; want 1, 0", txns, points)
	}
}

// TestInodeCacheAfterStackChange: a view whose stack changes to one with a
// newer record of an inode above the cached one serves the newer record.
func TestInodeCacheAfterStackChange(t *testing.T) {
	ctx := context.Background()
	f, _, s := newCountingFS(t, Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, y := pushLayer(t, f)
	if got, err := f.GetAttr(a.Ino); err != nil || got.Mode != 0o644 { // cached from y
		t.Fatalf("GetAttr: %v, mode %o", err, got.Mode)
	}
	// Another view over y writes a newer record into a layer of its own.
	mid, err := s.NewLayerOver(ctx, y)
	if err != nil {
		t.Fatal(err)
	}
	g := s.View([]LayerID{mid, y})
	mode := uint32(0o600)
	if _, err := g.SetAttr(a.Ino, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	top, err := s.NewLayerOver(ctx, mid)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetTop(top); err != nil { // stack: top, mid, y
		t.Fatal(err)
	}
	got, err := f.GetAttr(a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != 0o600 {
		t.Fatalf("after the stack change f has mode %o, want 600 (stale inode cache)", got.Mode)
	}
	if _, err := f.Lookup(RootIno, "f"); err != nil {
		t.Fatal(err)
	}
}

// TestInodeCacheBytesBounded checks that the inode cache's estimated
// memory stays within Options.InodeCacheBytes.
func TestInodeCacheBytesBounded(t *testing.T) {
	const bound = 4096
	f, _, _ := newCountingFS(t, Options{InodeCacheBytes: bound})
	var inos []InodeID
	for i := 0; i < 60; i++ {
		a, err := f.Create(RootIno, fmt.Sprintf("%0200d", i), CreateUnchecked, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		inos = append(inos, a.Ino)
	}
	pushLayer(t, f)
	peak := 0
	for _, ino := range inos {
		if _, err := f.GetAttr(ino); err != nil {
			t.Fatal(err)
		}
		f.cacheMu.Lock()
		peak = max(peak, f.cacheBytes)
		f.cacheMu.Unlock()
	}
	if peak > bound || peak == 0 {
		t.Fatalf("inode cache peaked at %d bytes, want 1..%d", peak, bound)
	}
}

// TestLookupDirOneTransaction checks that LookupDir reads the directory
// and the entry's inode in one transaction, reading the directory's record
// once: three point lookups for a name in a one-layer tree (directory,
// slot, inode).
func TestLookupDirOneTransaction(t *testing.T) {
	f, cs, _ := newCountingFS(t, Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs.reset()
	d, got, err := f.LookupDir(RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	if d.Ino != RootIno || d.Type != TypeDir || got.Ino != a.Ino {
		t.Fatalf("LookupDir: dir %d (type %v), child %d; want %d, %d", d.Ino, d.Type, got.Ino, RootIno, a.Ino)
	}
	if txns, points := cs.txns.Load(), cs.points.Load(); txns != 1 || points != 3 {
		t.Fatalf("LookupDir: %d transactions, %d point lookups; want 1, 3", txns, points)
	}
	d, _, err = f.LookupDir(RootIno, "missing")
	if !errors.Is(err, syscall.ENOENT) || d.Ino != RootIno {
		t.Fatalf("LookupDir of a missing name: dir %d, %v; want %d, ENOENT", d.Ino, err, RootIno)
	}
	d, _, err = f.LookupDir(a.Ino, "x")
	if !errors.Is(err, syscall.ENOTDIR) || d.Ino != a.Ino {
		t.Fatalf("LookupDir in a file: dir %d, %v; want %d, ENOTDIR", d.Ino, err, a.Ino)
	}
	d, _, err = f.LookupDir(987654, "x")
	if !errors.Is(err, syscall.ESTALE) || d.Ino != 0 {
		t.Fatalf("LookupDir in a missing dir: dir %d, %v; want 0, ESTALE", d.Ino, err)
	}
}

// TestGetAttrsOneTransaction checks that GetAttrs reads every inode in one
// transaction and answers nil for one that does not exist.
func TestGetAttrsOneTransaction(t *testing.T) {
	f, cs, _ := newCountingFS(t, Options{})
	var inos []InodeID
	for i := 0; i < 10; i++ {
		a, err := f.Create(RootIno, fmt.Sprint("f", i), CreateUnchecked, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		inos = append(inos, a.Ino)
	}
	if err := f.Unlink(RootIno, "f3"); err != nil {
		t.Fatal(err)
	}
	pushLayer(t, f)
	cs.reset()
	attrs, err := f.GetAttrs(inos)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range attrs {
		switch {
		case i == 3 && a != nil:
			t.Fatalf("attributes of the removed f3: %+v", *a)
		case i != 3 && (a == nil || a.Ino != inos[i]):
			t.Fatalf("attributes of f%d: %v", i, a)
		}
	}
	if txns := cs.txns.Load(); txns != 1 {
		t.Fatalf("GetAttrs of %d inodes: %d transactions, want 1", len(inos), txns)
	}
}

// TestGetAttrsScan checks GetAttrs, which reads the top layer's records of
// a listing with one key iteration, against GetAttr one inode at a time:
// inodes whose record is in the top layer, in a frozen layer only,
// removed in the top layer, never created, asked for in no order, and
// spread among so many other inodes that the iteration runs out of its
// budget; and that a dense listing costs fewer point lookups than inodes.
func TestGetAttrsScan(t *testing.T) {
	f, cs, _ := newCountingFS(t, Options{})
	create := func(dir InodeID, name string) InodeID {
		a, err := f.Create(dir, name, CreateUnchecked, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	var inos []InodeID
	for i := range 20 {
		inos = append(inos, create(RootIno, fmt.Sprint("old", i)))
	}
	pushLayer(t, f)
	mode := uint32(0o600)
	for i := range 20 {
		switch i % 4 {
		case 1: // copied up: the top layer's record
			if _, err := f.SetAttr(inos[i], SetAttr{Mode: &mode}); err != nil {
				t.Fatal(err)
			}
		case 2: // removed in the top layer
			if err := f.Unlink(RootIno, fmt.Sprint("old", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 20 {
		inos = append(inos, create(RootIno, fmt.Sprint("new", i)))
	}
	d, err := f.Mkdir(RootIno, "many", NewAttr{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 { // between the listing's inodes and the last few
		create(d.Ino, fmt.Sprint("x", i))
	}
	for i := range 3 {
		inos = append(inos, create(RootIno, fmt.Sprint("late", i)))
	}
	inos = append(inos, inos[len(inos)-1]+1000, 1) // never created
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(inos), func(i, j int) { inos[i], inos[j] = inos[j], inos[i] })
	check := func(inos []InodeID) {
		t.Helper()
		attrs, err := f.GetAttrs(inos)
		if err != nil {
			t.Fatal(err)
		}
		for i, ino := range inos {
			want, err := f.GetAttr(ino)
			switch {
			case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE):
				if attrs[i] != nil {
					t.Fatalf("inode %d does not exist, GetAttrs gave %+v", ino, *attrs[i])
				}
			case err != nil:
				t.Fatal(err)
			case attrs[i] == nil || *attrs[i] != want:
				t.Fatalf("inode %d: GetAttrs gave %v, GetAttr %+v", ino, attrs[i], want)
			}
		}
	}
	check(inos)
	// A dense listing: the 20 new files.
	var fresh []InodeID
	for i := range 20 {
		a, err := f.Lookup(RootIno, fmt.Sprint("new", i))
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, a.Ino)
	}
	check(fresh)
	cs.reset()
	if _, err := f.GetAttrs(fresh); err != nil {
		t.Fatal(err)
	}
	if points := cs.points.Load(); points >= int64(len(fresh)) {
		t.Fatalf("GetAttrs of %d neighbouring top-layer inodes: %d point lookups, want fewer than one each", len(fresh), points)
	}
}

// TestLookupTopCached: a warm LOOKUP of a name in the top layer reads the
// directory entry alone (both records come from the top-layer cache),
// and a change in between is seen.
func TestLookupTopCached(t *testing.T) {
	f, cs, _ := newCountingFS(t, Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.LookupDir(RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	cs.reset()
	if _, got, err := f.LookupDir(RootIno, "f"); err != nil || got.Ino != a.Ino {
		t.Fatalf("LookupDir: %+v, %v", got, err)
	}
	if txns, points := cs.txns.Load(), cs.points.Load(); txns != 1 || points != 1 {
		t.Fatalf("warm LookupDir: %d transactions, %d point lookups; want 1, 1", txns, points)
	}
	if err := f.Rename(RootIno, "f", RootIno, "g"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.LookupDir(RootIno, "f"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("LookupDir of a renamed name: %v, want ENOENT", err)
	}
	if _, got, err := f.LookupDir(RootIno, "g"); err != nil || got.Ino != a.Ino {
		t.Fatalf("LookupDir of the new name: %+v, %v", got, err)
	}
}

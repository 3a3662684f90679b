package nfsserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	nfs "github.com/willscott/go-nfs"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// opCountingStore counts a kv.Store's read-only and read-write
// transactions and its Syncs: what each NFS procedure costs the store.
type opCountingStore struct {
	kv.Store
	views, updates, syncs atomic.Int64
}

func (c *opCountingStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	c.views.Add(1)
	return c.Store.View(ctx, fn)
}

func (c *opCountingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	c.updates.Add(1)
	return c.Store.Update(ctx, fn)
}

func (c *opCountingStore) Sync(ctx context.Context) error {
	c.syncs.Add(1)
	return c.Store.Sync(ctx)
}

type opCost struct{ views, updates, syncs int64 }

// cost runs fn and returns what it cost the store.
func (c *opCountingStore) cost(fn func()) opCost {
	v, u, s := c.views.Load(), c.updates.Load(), c.syncs.Load()
	fn()
	return opCost{c.views.Load() - v, c.updates.Load() - u, c.syncs.Load() - s}
}

// TestRemoveReadsOnce checks that a REMOVE where the sticky-directory rule
// cannot apply reads the directory once and leaves finding the entry to
// the removal's own transaction (the post-operation attributes are a
// second read), and that in a sticky directory the entry's owner is still
// checked.
func TestRemoveReadsOnce(t *testing.T) {
	cs := &opCountingStore{Store: kvtest.NewStore(t)}
	m := branchestest.NewManager(t, branches.Options{Store: cs, ReclaimDelay: -1})
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	root := c.mnt("/main")
	dir, _, st := k.mkdir(root, "d", 0o777)
	must(t, st, "mkdir")
	for _, n := range []string{"a", "b"} {
		_, _, st := k.create(dir, n, 1, sa{mode: u32p(0o644)})
		must(t, st, "create "+n)
	}
	got := cs.cost(func() { must(t, k.remove(dir, "a"), "remove a") })
	if want := (opCost{views: 2, updates: 1}); got != want {
		t.Errorf("REMOVE: %+v, want %+v", got, want)
	}
	if st := k.remove(dir, "a"); st != nfs.NFSStatusNoEnt {
		t.Errorf("REMOVE of a removed name: %v, want NOENT", st)
	}
	if st := k.remove(dir, strings.Repeat("x", maxName+1)); st != nfs.NFSStatusNameTooLong {
		t.Errorf("REMOVE of a long name: %v, want NAMETOOLONG", st)
	}
	// Sticky: another user may not remove root's file.
	must(t, k.setattr(dir, sa{mode: u32p(0o1777)}), "chmod +t")
	other := c.as(authSys(1000, 1000))
	if st := other.remove(dir, "b"); st != nfs.NFSStatusAccess && st != nfs.NFSStatusPerm {
		t.Errorf("REMOVE of root's file in a sticky directory by uid 1000: %v, want PERM", st)
	}
	must(t, k.remove(dir, "b"), "remove b as root")
}

// BenchmarkRemove measures REMOVE of a file in a directory without the
// sticky bit, on an in-memory store (the files are created untimed).
func BenchmarkRemove(b *testing.B) {
	m := newManager(b, "")
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	k := c.as(authRoot)
	dir, _, st := k.mkdir(c.mnt("/main"), "d", 0o755)
	must(b, st, "mkdir")
	names := make([]string, b.N)
	for i := range names {
		names[i] = fmt.Sprintf("f%07d", i)
		_, _, st := k.create(dir, names[i], 1, sa{mode: u32p(0o644)})
		must(b, st, "create")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, n := range names {
		must(b, k.remove(dir, n), "remove")
	}
}

// TestDispatchAllocs checks that answering a call allocates its request,
// decoder and encoder together, and no log name, when nothing is logged:
// a NULL call (which reads nothing) costs two allocations, the request and
// the slice header that returns the reply buffer to its pool (five before:
// the request, its log name, the decoder, the encoder and that header).
func TestDispatchAllocs(t *testing.T) {
	m := newManager(t, "")
	s, err := New(Options{Branches: fixedSecret{m}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := callMsg(7, 2, progNFS, 3, 0, authNone, nil)
	allocs := testing.AllocsPerRun(200, func() {
		reply := s.dispatch(rec, false, "127.0.0.1:1", nil)
		if len(reply) < 12 || !bytes.Equal(reply[4:8], rec[:4]) {
			t.Fatalf("NULL call got reply %x", reply)
		}
		putBuf(reply)
	})
	if allocs > 2 {
		t.Errorf("a NULL call: %v allocations, want at most 2", allocs)
	}
}

package branches_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// leases adapts an etcdkv.Coord to branches.Leases, as serve does.
type leases struct{ *etcdkv.Coord }

func (l leases) Grant(ctx context.Context, ttl time.Duration) (branches.Lease, error) {
	le, err := l.Coord.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	return le, nil
}

// tryWrite writes p in branch b's view and returns the error.
func tryWrite(m *branches.Manager, b, p, data string) error {
	fs, _, err := m.View(b)
	if err != nil {
		return err
	}
	f, err := fs.Billy().Create(p)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(data)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestOwnership runs two Managers as two servers of one etcd store:
// a branch is written, checkpointed and committed only through the
// server that forked it; the other serves it read-only (EROFS) and is
// refused its lifecycle operations with an error naming the owner; a
// fork from it elsewhere takes its frozen state, or is refused while its
// owner has unfrozen writes; main takes no NFS writes; of two siblings
// owned by different servers and committed at once exactly one wins;
// and once the owner stops, its branch is taken over, with its data.
func TestOwnership(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/owner/"}
	open := func(name string) (*branches.Manager, *etcdkv.Coord) {
		co := c.NewCoord(t, o)
		m, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: co, Leases: leases{co},
			LeaseTTL: 2 * time.Second, Server: name, ReclaimDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		return m, co
	}
	a, aco := open("A")
	b, _ := open("B")
	defer b.Close()

	if err := tryWrite(a, "main", "m", "x"); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("a write to main on a shared store: %v, want EROFS", err)
	}
	must(a.Fork(ctx, "main", "x"))(t)
	write(t, a, "x", "f", "one")
	eventually(t, "x on b", func() error { _, _, err := b.View("x"); return err })
	if err := tryWrite(b, "x", "g", "from b"); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("a write to x through b, which does not own it: %v, want EROFS", err)
	}
	if got := read(t, b, "x", "f"); got != "one" {
		t.Fatalf("x/f read through b: %q", got)
	}
	var ne *branches.NotOwnerError
	if _, err := b.Commit(ctx, "x"); !errors.As(err, &ne) || ne.Owner != "A" || !strings.Contains(err.Error(), "takeover x") {
		t.Fatalf("commit of x through b: %v, want not the owner, naming A and the takeover", err)
	}
	if _, err := b.Checkpoint(ctx, "x", "c"); !errors.Is(err, branches.ErrNotOwner) {
		t.Fatalf("checkpoint of x through b: %v, want not the owner", err)
	}
	if _, err := b.Takeover(ctx, "x"); !errors.As(err, &ne) || ne.Owner != "A" {
		t.Fatalf("takeover of x through b while a runs: %v, want refused naming A", err)
	}
	// x's top holds a's writes: b cannot freeze it.
	if _, err := b.Fork(ctx, "x", "y"); !errors.Is(err, branches.ErrNotOwner) {
		t.Fatalf("fork of x through b while a's writes are unfrozen: %v, want not the owner", err)
	}
	must(a.Checkpoint(ctx, "x", "c1"))(t)
	eventually(t, "x's new top on b", func() error {
		_, err := b.Fork(ctx, "x", "y")
		return err
	})
	write(t, a, "x", "f", "two")
	write(t, b, "y", "h", "b's own")
	if got := read(t, b, "y", "f"); got != "one" {
		t.Fatalf("y, forked through b from x's frozen state, reads f = %q, want one", got)
	}

	// a stops without a word: its lease expires, and b takes x over.
	must(a.Fork(ctx, "main", "keep"))(t)
	a.Close()
	aco.Close()
	eventually(t, "takeover of x through b after a stopped", func() error {
		_, err := b.Takeover(ctx, "x")
		return err
	})
	if got := read(t, b, "x", "f"); got != "two" {
		t.Fatalf("x/f after the takeover: %q, want what a wrote last", got)
	}
	write(t, b, "x", "g", "b now")
	must(b.Commit(ctx, "y"))(t) // into x, which b owns now
	if got := read(t, b, "x", "h"); got != "b's own" {
		t.Fatalf("x/h after y's commit into it: %q", got)
	}

	// a's name again, in a new process, after its lease expired: it
	// owns keep again, which nobody took, and not x, which b took.
	a, _ = open("A")
	defer a.Close()
	if err := tryWrite(a, "keep", "k", "again"); err != nil {
		t.Fatalf("a write to keep through a restarted a, which forked it: %v", err)
	}
	if err := tryWrite(a, "x", "k", "again"); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("a write to x through a restarted a after b took it over: %v, want EROFS", err)
	}
	if in := must(a.Get(ctx, "x"))(t); in.Owner != "B" {
		t.Fatalf("x's owner after b took it over: %q", in.Owner)
	}
	must(b.Commit(ctx, "x"))(t)
	if got := read(t, b, "main", "g"); got != "b now" {
		t.Fatalf("main/g: %q", got)
	}
	// Siblings owned by different servers, committed at once: one wins.
	must(a.Fork(ctx, "main", "sa"))(t)
	must(b.Fork(ctx, "main", "sb"))(t)
	write(t, a, "sa", "s", "a")
	write(t, b, "sb", "s", "b")
	eventually(t, "sa on b", func() error { _, _, err := b.View("sa"); return err })
	eventually(t, "sb on a", func() error { _, _, err := a.View("sb"); return err })
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, m := range []*branches.Manager{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Commit(ctx, []string{"sa", "sb"}[i])
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("concurrent commits of sa through a and sb through b: %v and %v, want exactly one to win", errs[0], errs[1])
	}
	loser, lm, wm := "sb", b, a
	if errs[0] != nil {
		loser, lm, wm = "sa", a, b
	}
	lerr := errs[0]
	if lerr == nil {
		lerr = errs[1]
	}
	if !errors.Is(lerr, branches.ErrStale) {
		t.Fatalf("the losing commit of %s: %v, want invalidated", loser, lerr)
	}
	for _, m := range []*branches.Manager{lm, wm} {
		eventually(t, loser+" invalidated on both servers", func() error {
			_, _, err := m.View(loser)
			if !errors.Is(err, branches.ErrInvalidated) {
				return errors.New("not invalidated")
			}
			return nil
		})
	}

}

// TestOwnershipLeaseLost: when a server's lease goes (revoked here, as an
// operator would free a stuck server's keys, or expired while the
// cluster was out of reach), its Manager stops writing its branches,
// grants a new lease, and claims again those no other server took: the
// owner key comes back under the new lease and writes work again.
func TestOwnershipLeaseLost(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/lost/"}
	co := c.NewCoord(t, o)
	st := c.NewStore(t, o)
	m, err := branches.Open(ctx, branches.Options{Store: st, Coord: co, Leases: leases{co},
		LeaseTTL: 2 * time.Second, Server: "A", ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := must(m.Fork(ctx, "main", "x"))(t)
	write(t, m, "x", "f", "before")
	key := binary.BigEndian.AppendUint64([]byte{'O'}, uint64(in.ID))
	owner := func() (server string, lease int64, err error) {
		err = st.View(ctx, func(tx kv.Txn) error {
			v, err := tx.Get(key)
			if err != nil {
				return err
			}
			var rec struct {
				Server string `json:"server"`
				Lease  int64  `json:"lease"`
			}
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			server, lease = rec.Server, rec.Lease
			return nil
		})
		return server, lease, err
	}
	server, old, err := owner()
	if err != nil || server != "A" {
		t.Fatalf("x's owner key: %q, %v; want A", server, err)
	}
	if err := c.NewCoord(t, o).Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "x owned again under a new lease", func() error {
		server, lease, err := owner()
		if err != nil {
			return err
		}
		if server != "A" || lease == old {
			return fmt.Errorf("owner %q under lease %x, the revoked one %x", server, lease, old)
		}
		return tryWrite(m, "x", "g", "after")
	})
	if got := read(t, m, "x", "f"); got != "before" {
		t.Fatalf("x/f after the lease came back: %q", got)
	}
}

// TestForksOnTwoServersKeepTheFastPath: a fork froze main's top on one
// server; the other, once it has seen that, forks from main without
// freezing the empty new top again, so the first fork's commit still
// takes the fast path (main did not change for it).
func TestForksOnTwoServersKeepTheFastPath(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/fast/"}
	open := func(name string) *branches.Manager {
		co := c.NewCoord(t, o)
		m, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: co, Leases: leases{co},
			Server: name, ReclaimDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a, b := open("A"), open("B")
	must(a.Fork(ctx, "main", "s1"))(t)
	write(t, a, "s1", "f", "a")
	eventually(t, "main's new top on b", func() error {
		av, _, _ := a.View("main")
		bv, _, _ := b.View("main")
		if fmt.Sprint(av.Stack()) != fmt.Sprint(bv.Stack()) {
			return fmt.Errorf("main's stack %v on a, %v on b", av.Stack(), bv.Stack())
		}
		return nil
	})
	must(b.Fork(ctx, "main", "s2"))(t)
	res := must(a.Commit(ctx, "s1"))(t)
	if !res.FastPath {
		t.Fatal("the commit of s1 merged: b's fork froze main's top again")
	}
}

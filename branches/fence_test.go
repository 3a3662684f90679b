package branches_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// pausedLeases grants real etcd leases whose loss its Managers learn of
// only when the test says so (done): a server whose keep-alive goroutine
// was paused, or had not run yet, when its lease expired. Grants after
// the first wait for grant, when set.
type pausedLeases struct {
	leases
	mu     sync.Mutex
	done   chan struct{} // the Done of every lease granted
	ids    []int64
	grant  chan struct{} // nil: grant at once
	grants int
}

type pausedLease struct {
	*etcdkv.Lease
	done <-chan struct{}
}

func (l pausedLease) Done() <-chan struct{} { return l.done }

func (p *pausedLeases) Grant(ctx context.Context, ttl time.Duration) (branches.Lease, error) {
	p.mu.Lock()
	p.grants++
	wait := p.grants > 1 && p.grant != nil
	g := p.grant
	p.mu.Unlock()
	if wait {
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	le, err := p.Coord.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, le.ID())
	return pausedLease{Lease: le, done: p.done}, nil
}

// lose tells the Managers that every lease granted so far was lost;
// those granted from now on are kept until the next lose.
func (p *pausedLeases) lose() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.done)
	p.done = make(chan struct{})
}

// lastID is the id of the lease granted last.
func (p *pausedLeases) lastID() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids[len(p.ids)-1]
}

// TestPausedOwnerIsFenced: server A owns x, and is paused past its lease
// (its lease is revoked here while A's Manager has not heard of it, as a
// process stopped by SIGSTOP has not); B takes x over and writes, and
// the write is acknowledged. A then writes, checkpoints and commits x,
// believing it still owns it: every one of them fails (EROFS, not the
// owner), because each transaction compares x's owner key to A's lease
// in its commit. B's acknowledged bytes stay, on B and in main after B's
// commit. Before the fencing token, A's write was applied and replaced
// B's bytes.
func TestPausedOwnerIsFenced(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/fence/"}
	aco := c.NewCoord(t, o)
	al := &pausedLeases{leases: leases{aco}, done: make(chan struct{})}
	a, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: aco, Leases: al,
		LeaseTTL: 2 * time.Second, Server: "A", ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bco := c.NewCoord(t, o)
	b, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: bco, Leases: leases{bco},
		LeaseTTL: 2 * time.Second, Server: "B", ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	must(a.Fork(ctx, "main", "x"))(t)
	write(t, a, "x", "f", "A before the pause")
	must(a.Fork(ctx, "x", "y"))(t) // a child of x, for a commit into x
	write(t, a, "y", "g", "A's child")
	eventually(t, "x on b", func() error { _, _, err := b.View("x"); return err })
	// A's writer stalls with x's view open, as a paused process's would.
	av, _, err := a.View("x")
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := av.Billy().OpenFile("f", 0o2 /* O_RDWR */, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A's lease ends; A's Manager does not know.
	if err := bco.Revoke(ctx, al.lastID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "takeover of x through b", func() error { _, err := b.Takeover(ctx, "x"); return err })
	write(t, b, "x", "f", "B, acknowledged")

	// A resumes: the stalled write lands after the takeover.
	if _, err := stalled.Write([]byte("A late")); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("the paused owner's write after the takeover: %v, want EROFS", err)
	}
	stalled.Close()
	if err := tryWrite(a, "x", "f", "A after"); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("a new write by the paused owner after the takeover: %v, want EROFS", err)
	}
	// Every other change of the paused owner's, through the view it
	// still believes writable.
	f, err := av.Lookup(cowfs.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	mode, size := uint32(0o600), uint64(1)
	changes := map[string]func() error{
		"write":    func() error { _, err := av.WriteAt(f.Ino, []byte("A"), 0); return err },
		"truncate": func() error { _, err := av.SetAttr(f.Ino, cowfs.SetAttr{Size: &size}); return err },
		"chmod":    func() error { _, err := av.SetAttr(f.Ino, cowfs.SetAttr{Mode: &mode}); return err },
		"create": func() error {
			_, err := av.Create(cowfs.RootIno, "new", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
			return err
		},
		"mkdir":   func() error { _, err := av.Mkdir(cowfs.RootIno, "d", cowfs.NewAttr{Mode: 0o755}); return err },
		"symlink": func() error { _, err := av.Symlink(cowfs.RootIno, "l", "f", cowfs.NewAttr{}); return err },
		"link":    func() error { _, err := av.Link(f.Ino, cowfs.RootIno, "hard"); return err },
		"rename":  func() error { return av.Rename(cowfs.RootIno, "f", cowfs.RootIno, "moved") },
		"remove":  func() error { return av.Unlink(cowfs.RootIno, "f") },
	}
	for what, change := range changes {
		if err := change(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s by the paused owner after the takeover: %v, want EROFS", what, err)
		}
	}
	if _, err := a.Checkpoint(ctx, "x", "late"); !errors.Is(err, branches.ErrNotOwner) {
		t.Fatalf("a checkpoint by the paused owner: %v, want not the owner", err)
	}
	if _, err := a.Commit(ctx, "y"); !errors.Is(err, branches.ErrNotOwner) {
		t.Fatalf("a commit into x by the paused owner: %v, want not the owner", err)
	}
	if _, err := a.Abort(ctx, "x"); !errors.Is(err, branches.ErrNotOwner) {
		t.Fatalf("an abort of x by the paused owner: %v, want not the owner", err)
	}
	if got := read(t, b, "x", "f"); got != "B, acknowledged" {
		t.Fatalf("x/f on b after the paused owner resumed: %q, want B's acknowledged write", got)
	}
	must(b.Abort(ctx, "y"))(t) // nobody owns it: A's lease is gone
	close(al.done)             // A's Manager learns of the loss at last
	must(b.Commit(ctx, "x"))(t)
	if got := read(t, b, "main", "f"); got != "B, acknowledged" {
		t.Fatalf("main/f after b committed x: %q, want B's acknowledged write", got)
	}
}

// TestLeaseRegainAnswersAgain: while a server is getting a new lease
// after it lost its own (the cluster was out of reach for a TTL), a write
// to a branch it owned fails with EAGAIN (NFS3ERR_JUKEBOX: the client
// retries), not EROFS, which clients take as final; once it has claimed
// the branch again, the same write succeeds.
func TestLeaseRegainAnswersAgain(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/regain/"}
	co := c.NewCoord(t, o)
	done := make(chan struct{})
	pl := &pausedLeases{leases: leases{co}, done: done, grant: make(chan struct{})}
	m, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: co, Leases: pl,
		LeaseTTL: 2 * time.Second, Server: "A", ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	must(m.Fork(ctx, "main", "x"))(t)
	write(t, m, "x", "f", "before")
	if err := c.NewCoord(t, o).Revoke(ctx, pl.lastID()); err != nil {
		t.Fatal(err)
	}
	close(done) // the lease is lost; the next grant waits for pl.grant
	pl.mu.Lock()
	pl.done = make(chan struct{})
	pl.mu.Unlock()
	eventually(t, "writes to x refused while the lease is being granted again", func() error {
		err := tryWrite(m, "x", "g", "during")
		if err == nil {
			return errors.New("the write succeeded")
		}
		if !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("a write to x while the server gets a new lease: %v, want EAGAIN (JUKEBOX), not EROFS", err)
		}
		return nil
	})
	close(pl.grant)
	eventually(t, "x claimed again", func() error { return tryWrite(m, "x", "g", "after") })
	if got := read(t, m, "x", "f"); got != "before" {
		t.Fatalf("x/f: %q", got)
	}
}

// TestLostLeaseNoReclaimAfterTakeover: server A owns x and is paused past
// its lease; B takes x over and writes, acknowledged; then B's lease is
// lost too (B is paused as well), so x's owner key is gone. When A
// resumes and gets a new lease, it must not claim x again: B took it
// over (the stored record says so), and B claims it back when it
// resumes. A's writes to x are refused (EROFS), and B's bytes stay.
// Before, A claimed x again because no owner key was left, and its
// late write was applied over B's acknowledged one.
func TestLostLeaseNoReclaimAfterTakeover(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/fence2/"}
	aco := c.NewCoord(t, o)
	al := &pausedLeases{leases: leases{aco}, done: make(chan struct{})}
	a, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: aco, Leases: al,
		LeaseTTL: 2 * time.Second, Server: "A", ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bco := c.NewCoord(t, o)
	bl := &pausedLeases{leases: leases{bco}, done: make(chan struct{})}
	b, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: bco, Leases: bl,
		LeaseTTL: 2 * time.Second, Server: "B", ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	must(a.Fork(ctx, "main", "x"))(t)
	write(t, a, "x", "f", "A before the pause")
	eventually(t, "x on b", func() error { _, _, err := b.View("x"); return err })
	// A's lease ends; A's Manager does not know.
	if err := bco.Revoke(ctx, al.lastID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "takeover of x through b", func() error { _, err := b.Takeover(ctx, "x"); return err })
	write(t, b, "x", "f", "B, acknowledged")
	// B's lease ends too; B's Manager does not know yet: x has no owner
	// key now.
	if err := aco.Revoke(ctx, bl.lastID()); err != nil {
		t.Fatal(err)
	}
	al.lose() // A learns of its loss, gets a new lease, claims again
	eventually(t, "A's write to x refused for good", func() error {
		err := tryWrite(a, "x", "f", "A late")
		switch {
		case err == nil:
			t.Fatalf("A's write to x after B took it over and lost its lease was applied: A claimed x again")
		case errors.Is(err, syscall.EAGAIN):
			return err // A is getting its new lease
		case !errors.Is(err, syscall.EROFS):
			t.Fatalf("A's write to x after B took it over: %v, want EROFS", err)
		}
		return nil
	})
	bl.lose() // B learns of its loss, and claims x back
	eventually(t, "B owns x again", func() error { return tryWrite(b, "x", "g", "B again") })
	if err := tryWrite(a, "x", "f", "A later"); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("A's write to x once B claimed it back: %v, want EROFS", err)
	}
	if got := read(t, b, "x", "f"); got != "B, acknowledged" {
		t.Fatalf("x/f on b: %q, want B's acknowledged write", got)
	}
}

package branches_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// eventually polls cond until it holds, failing the test after a
// generous bound (a watch event that never comes, not a slow one).
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dropFirst is a Coord whose first watch drops its first event and
// fails, as a watch cut off by a lost leader or a compaction would.
type dropFirst struct {
	*etcdkv.Coord
	watches atomic.Int32
}

func (d *dropFirst) Watch(ctx context.Context, prefix []byte, from int64, fn func(kv.Event) error) error {
	if d.watches.Add(1) > 1 {
		return d.Coord.Watch(ctx, prefix, from, fn)
	}
	return d.Coord.Watch(ctx, prefix, from, func(kv.Event) error {
		return errors.New("watch cut off (test)")
	})
}

// TestRefreshByWatch runs two Managers on two clients of a 3-member etcd
// cluster: each learns of the other's forks, commits and aborts through
// the watch, without reopening. A branch forked on one appears on the
// other; a commit on one shows in the parent's files on the other, and
// the committed branch and its invalidated sibling answer stale there;
// an aborted branch answers stale; and after a watch that failed and
// dropped an event, a reload catches up with it.
func TestRefreshByWatch(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	open := func(coord branches.Coord) *branches.Manager {
		m, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, etcdkv.Options{Prefix: "/refresh/"}), Coord: coord, ReclaimDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a := open(c.NewCoord(t, etcdkv.Options{Prefix: "/refresh/"}))
	drop := &dropFirst{Coord: c.NewCoord(t, etcdkv.Options{Prefix: "/refresh/"})}
	b := open(drop)

	// The first event b sees is dropped with its watch: the reload
	// after it must find x anyway.
	must(a.Fork(ctx, "main", "x"))(t)
	eventually(t, "x forked on a, seen on b", func() error { _, _, err := b.View("x"); return err })
	if drop.watches.Load() < 2 {
		t.Fatalf("b watched %d times, want a second watch after the failed one", drop.watches.Load())
	}
	must(a.Fork(ctx, "main", "y"))(t)
	must(b.Fork(ctx, "main", "z"))(t)
	eventually(t, "y forked on a, seen on b", func() error { _, _, err := b.View("y"); return err })
	eventually(t, "z forked on b, seen on a", func() error { _, _, err := a.View("z"); return err })

	write(t, a, "x", "f", "from a")
	if got := read(t, b, "x", "f"); got != "from a" {
		t.Fatalf("x/f written on a, read on b: %q", got)
	}
	res := must(a.Commit(ctx, "x"))(t)
	if len(res.Invalidated) != 2 {
		t.Fatalf("the commit of x invalidated %v, want y and z", res.Invalidated)
	}
	eventually(t, "main's f on b after the commit of x on a", func() error {
		if got := read(t, b, "main", "f"); got != "from a" {
			return errors.New(got)
		}
		return nil
	})
	for _, name := range []string{"y", "z"} {
		eventually(t, name+" on b after the commit of x on a", func() error {
			_, _, err := b.View(name)
			var ie *branches.InvalidatedError
			if !errors.As(err, &ie) {
				return errors.New("not invalidated")
			}
			return nil
		})
	}
	if _, _, err := b.View("x"); !errors.Is(err, branches.ErrNotFound) {
		t.Fatalf("x on b after its commit on a: %v, want not found", err)
	}

	// A view b handed out before an abort on a goes stale.
	must(a.Fork(ctx, "main", "w"))(t)
	var fs interface{ Err() error }
	eventually(t, "w on b", func() error {
		v, _, err := b.View("w")
		if err == nil {
			fs = v
		}
		return err
	})
	must(a.Abort(ctx, "w"))(t)
	eventually(t, "w's view on b after its abort on a", func() error {
		if !errors.Is(fs.Err(), branches.ErrStale) {
			return errors.New("still usable")
		}
		return nil
	})
	// The same name forked again on b is a new branch on a.
	must(b.Fork(ctx, "main", "w"))(t)
	write(t, b, "w", "g", "from b")
	eventually(t, "w forked again on b, read on a", func() error {
		if got := read(t, a, "w", "g"); got != "from b" {
			return errors.New(got)
		}
		return nil
	})
	must(b.Commit(ctx, "w"))(t)
	eventually(t, "main's g on a after the commit of w on b", func() error {
		if got := read(t, a, "main", "g"); got != "from b" {
			return errors.New(got)
		}
		return nil
	})
}

// TestStaleDuringLongCommit: while a commit on b holds its Manager's
// operations (blocked in its merge), an abort and a sibling's commit on a
// still make b's views of those branches stale: STALE comes from the
// watch, not after b's own work.
func TestStaleDuringLongCommit(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	open := func() *branches.Manager {
		o := etcdkv.Options{Prefix: "/stalelong/"}
		m, err := branches.Open(ctx, branches.Options{Store: c.NewStore(t, o), Coord: c.NewCoord(t, o), ReclaimDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a, b := open(), open()
	must(a.Fork(ctx, "main", "w"))(t)
	must(a.Fork(ctx, "main", "q"))(t)
	must(a.Fork(ctx, "q", "s1"))(t)
	must(a.Fork(ctx, "q", "s2"))(t)
	views := map[string]interface{ Err() error }{}
	for _, name := range []string{"w", "s2"} {
		eventually(t, name+" forked on a, seen on b", func() error {
			v, _, err := b.View(name)
			if err == nil {
				views[name] = v
			}
			return err
		})
	}
	// A commit on b that takes the merge path: its parent p changed
	// since c was forked.
	must(b.Fork(ctx, "main", "p"))(t)
	must(b.Fork(ctx, "p", "c"))(t)
	write(t, b, "c", "f", "child")
	write(t, b, "p", "g", "parent")
	entered, release := make(chan struct{}), make(chan struct{})
	b.SetMergeHook(func() {
		close(entered)
		<-release
	})
	done := make(chan error, 1)
	go func() { _, err := b.Commit(ctx, "c"); done <- err }()
	<-entered
	released := false
	defer func() {
		if !released {
			close(release)
			<-done
		}
	}()

	must(a.Abort(ctx, "w"))(t)
	must(a.Commit(ctx, "s1"))(t)
	eventually(t, "w's view on b after its abort on a, during b's commit", func() error {
		if !errors.Is(views["w"].Err(), branches.ErrStale) {
			return errors.New("still usable")
		}
		return nil
	})
	eventually(t, "s2's view on b after the commit of s1 on a, during b's commit", func() error {
		var ie *branches.InvalidatedError
		if !errors.As(views["s2"].Err(), &ie) {
			return errors.New("still usable")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("b's commit ended before its merge was released: %v", err)
	default:
	}
	close(release)
	released = true
	if err := <-done; err != nil {
		t.Fatalf("b's commit of c: %v", err)
	}
	// The records follow once b's commit lets them.
	eventually(t, "s2 invalidated in b's records", func() error {
		_, _, err := b.View("s2")
		var ie *branches.InvalidatedError
		if !errors.As(err, &ie) {
			return errors.New("not invalidated")
		}
		return nil
	})
	if got := read(t, b, "p", "f"); got != "child" {
		t.Fatalf("p/f after the commit of c on b = %q", got)
	}
}

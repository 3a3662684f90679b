package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// wait bounds how long a test waits for something that must happen; it
// only catches what never happens, and asserts no speed.
const wait = 30 * time.Second

// watch runs c.Watch on prefix from revision from in the background and
// returns its events; the watch stops when the test ends.
func watch(t *testing.T, c *etcdkv.Coord, prefix string, from int64) (<-chan etcdkv.Event, <-chan error) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	events, done := make(chan etcdkv.Event, 100), make(chan error, 1)
	go func() {
		done <- c.Watch(wctx, []byte(prefix), from, func(e etcdkv.Event) error { events <- e; return nil })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return events, done
}

func next(t *testing.T, events <-chan etcdkv.Event, what string) etcdkv.Event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(wait):
		t.Fatalf("no event for %s after %v", what, wait)
		return etcdkv.Event{}
	}
}

func holder(t *testing.T, s kv.Store, key string) (string, bool) {
	t.Helper()
	var v []byte
	err := s.View(ctx, func(tx kv.Txn) error {
		var err error
		v, err = tx.Get([]byte(key))
		return err
	})
	if errors.Is(err, kv.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(v), true
}

// TestCoord runs the ownership and invalidation primitives on one
// 3-member cluster, with each "server" its own client.
func TestCoord(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	prefix := 0
	opts := func() etcdkv.Options {
		prefix++
		return etcdkv.Options{Prefix: fmt.Sprintf("/coord/%d/", prefix)}
	}

	t.Run("Claim", func(t *testing.T) {
		o := opts()
		a, b, s := c.NewCoord(t, o), c.NewCoord(t, o), c.NewStore(t, o)
		la, err := a.Grant(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Grant(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, err := la.Claim(ctx, []byte("owner/br1"), []byte("a")); !ok || err != nil {
			t.Fatalf("first Claim: %v, %v", ok, err)
		}
		if ok, h, err := lb.Claim(ctx, []byte("owner/br1"), []byte("b")); ok || err != nil || string(h) != "a" {
			t.Fatalf("Claim of a held key: %v, holder %q, %v; want false, \"a\"", ok, h, err)
		}
		if ok, _, err := la.Claim(ctx, []byte("owner/br1"), []byte("a2")); !ok || err != nil {
			t.Fatalf("Claim again by the holder: %v, %v", ok, err)
		}
		if v, _ := holder(t, s, "owner/br1"); v != "a2" {
			t.Fatalf("the store reads %q after the holder's second Claim", v)
		}
		if ok, err := lb.Release(ctx, []byte("owner/br1")); ok || err != nil {
			t.Fatalf("Release by another lease: %v, %v; want false", ok, err)
		}
		if ok, err := la.Release(ctx, []byte("owner/br1")); !ok || err != nil {
			t.Fatalf("Release by the holder: %v, %v", ok, err)
		}
		if ok, _, err := lb.Claim(ctx, []byte("owner/br1"), []byte("b")); !ok || err != nil {
			t.Fatalf("Claim of a released key: %v, %v", ok, err)
		}
		// Revoking deletes the lease's keys at once, and its holder sees it.
		if err := lb.Revoke(ctx); err != nil {
			t.Fatal(err)
		}
		if v, ok := holder(t, s, "owner/br1"); ok {
			t.Fatalf("a key of a revoked lease is still there: %q", v)
		}
		select {
		case <-lb.Done():
		case <-time.After(wait):
			t.Fatal("Done not closed after Revoke")
		}
		if _, _, err := lb.Claim(ctx, []byte("owner/br2"), []byte("b")); !errors.Is(err, etcdkv.ErrLeaseLost) {
			t.Fatalf("Claim with a revoked lease: %v, want ErrLeaseLost", err)
		}
	})

	t.Run("RevokedElsewhere", func(t *testing.T) {
		// An operator frees a stuck server's branches: the holder learns
		// that its lease is gone.
		o := opts()
		a, b := c.NewCoord(t, o), c.NewCoord(t, o)
		la, err := a.Grant(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, err := la.Claim(ctx, []byte("owner/br1"), []byte("a")); !ok || err != nil {
			t.Fatalf("Claim: %v, %v", ok, err)
		}
		if err := b.Revoke(ctx, la.ID()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-la.Done():
		case <-time.After(wait):
			t.Fatal("the holder did not see its lease revoked by another client")
		}
		if !errors.Is(la.Err(), etcdkv.ErrLeaseLost) {
			t.Fatalf("Err after the lease was revoked: %v", la.Err())
		}
		if err := b.Revoke(ctx, la.ID()); err != nil {
			t.Fatalf("revoking a gone lease: %v", err)
		}
	})

	t.Run("Expiry", func(t *testing.T) {
		// A server dies without revoking: its keys go once the TTL runs
		// out, a watcher sees them go, and another server may claim them.
		o := opts()
		a, b := c.NewCoord(t, o), c.NewCoord(t, o)
		rev, err := b.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events, _ := watch(t, b, "owner/", rev+1)
		la, err := a.Grant(ctx, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, err := la.Claim(ctx, []byte("owner/br1"), []byte("a")); !ok || err != nil {
			t.Fatalf("Claim: %v, %v", ok, err)
		}
		if e := next(t, events, "the claim"); string(e.Key) != "owner/br1" || e.Deleted || string(e.Value) != "a" {
			t.Fatalf("event %+v, want the claim of owner/br1", e)
		}
		a.Close() // keep-alives stop; the lease is not revoked
		start := time.Now()
		<-la.Done()
		e := next(t, events, "the expiry")
		if string(e.Key) != "owner/br1" || !e.Deleted {
			t.Fatalf("event %+v, want owner/br1 deleted", e)
		}
		t.Logf("the key went %v after its holder stopped (TTL %v)", time.Since(start).Round(10*time.Millisecond), la.TTL())
		lb, err := b.Grant(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, err := lb.Claim(ctx, []byte("owner/br1"), []byte("b")); !ok || err != nil {
			t.Fatalf("Claim after the holder's lease expired: %v, %v", ok, err)
		}
	})

	t.Run("Watch", func(t *testing.T) {
		o := opts()
		w, s := c.NewCoord(t, o), c.NewStore(t, o)
		rev, err := w.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events, _ := watch(t, w, "inv/", rev+1)
		var worst time.Duration
		last := rev
		for i := range 20 {
			err := s.Update(ctx, func(tx kv.Txn) error {
				if err := tx.Set([]byte("other/x"), []byte("not watched")); err != nil {
					return err
				}
				if i%2 == 1 {
					return tx.Delete(fmt.Appendf(nil, "inv/%d", i-1))
				}
				return tx.Set(fmt.Appendf(nil, "inv/%d", i), fmt.Appendf(nil, "v%d", i))
			})
			if err != nil {
				t.Fatal(err)
			}
			committed := time.Now()
			e := next(t, events, fmt.Sprintf("commit %d", i))
			worst = max(worst, time.Since(committed))
			want := fmt.Sprintf("inv/%d", i-i%2)
			if string(e.Key) != want || e.Deleted != (i%2 == 1) || e.Revision <= last {
				t.Fatalf("commit %d: event %+v (last revision %d), want %s deleted=%v", i, e, last, want, i%2 == 1)
			}
			if !e.Deleted && string(e.Value) != fmt.Sprintf("v%d", i) {
				t.Fatalf("commit %d: value %q", i, e.Value)
			}
			last = e.Revision
		}
		t.Logf("slowest event: %v after its commit returned", worst)
		select {
		case e := <-events:
			t.Fatalf("an event outside the prefix or repeated: %+v", e)
		default:
		}
		// A watch from a revision the cluster compacted away fails
		// cleanly.
		if _, err := c.NewStore(t, etcdkv.Options{Retention: -1}).ReclaimSpace(ctx); err != nil {
			t.Fatal(err)
		}
		err = w.Watch(ctx, []byte("inv/"), rev+1, func(etcdkv.Event) error { return nil })
		if !errors.Is(err, etcdkv.ErrCompacted) {
			t.Fatalf("Watch from a compacted revision: %v, want ErrCompacted", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := w.Watch(cctx, []byte("inv/"), 0, func(etcdkv.Event) error { return nil }); !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch with a canceled context: %v", err)
		}
	})
}

// TestMemberKilledMidCommit: writers commit transactions of 8 keys while
// the leader is stopped under them. Every transaction ends applied whole
// or not at all: one acknowledged is whole, one refused is absent, one of
// unknown outcome is one or the other; and commits go on with two members.
func TestMemberKilledMidCommit(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	s := c.NewStore(t, etcdkv.Options{Prefix: "/kill/", RequestTimeout: 3 * time.Second})
	const writers, keys = 3, 8
	type result struct{ err error }
	results := make([][]result, writers)
	var commits atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := s.Update(ctx, func(tx kv.Txn) error {
					for j := range keys {
						if err := tx.Set(fmt.Appendf(nil, "t/%d/%05d/%d", g, i, j), fmt.Appendf(nil, "%d-%d", g, i)); err != nil {
							return err
						}
					}
					return nil
				})
				results[g] = append(results[g], result{err})
				if err == nil {
					commits.Add(1)
				}
			}
		})
	}
	waitCommits := func(n int64, what string) {
		deadline := time.Now().Add(wait)
		for commits.Load() < n {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: %d commits after %v", what, commits.Load(), wait)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCommits(50, "before the kill")
	leader := c.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	before := commits.Load()
	c.Stop(leader)
	waitCommits(before+50, "after the leader was stopped")
	close(stop)
	wg.Wait()

	present := map[string]int{}
	err := s.View(ctx, func(tx kv.Txn) error {
		return tx.Iterate([]byte("t/"), nil, true, func(k, _ []byte) (bool, error) {
			var g, i, j int
			if _, err := fmt.Sscanf(string(k), "t/%d/%05d/%d", &g, &i, &j); err != nil {
				return false, err
			}
			present[fmt.Sprintf("%d/%d", g, i)]++
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	var ok, unknown, refused int
	for g, rs := range results {
		for i, r := range rs {
			n := present[fmt.Sprintf("%d/%d", g, i)]
			delete(present, fmt.Sprintf("%d/%d", g, i))
			switch {
			case r.err == nil:
				ok++
				if n != keys {
					t.Errorf("transaction %d/%d was acknowledged and %d of its %d keys are there", g, i, n, keys)
				}
			case errors.Is(r.err, kv.ErrUnknownOutcome):
				unknown++
				if n != 0 && n != keys {
					t.Errorf("transaction %d/%d of unknown outcome was applied in part: %d of %d keys", g, i, n, keys)
				}
			default:
				refused++
				if n != 0 {
					t.Errorf("transaction %d/%d failed (%v) and %d of its keys are there", g, i, r.err, n)
				}
			}
		}
	}
	for k, n := range present {
		t.Errorf("%d keys of transaction %s, never attempted", n, k)
	}
	t.Logf("leader m%d stopped after %d commits: %d acknowledged, %d of unknown outcome, %d refused", leader, before, ok, unknown, refused)
}

// TestLeaseLostWithQuorum: when the cluster loses its quorum the holder of
// a lease sees it lost after its TTL (it cannot renew it), so it stops
// acting as owner; once the cluster is back, the key the lease held goes
// when the TTL runs out again (nobody renews it), and another server can
// claim it.
func TestLeaseLostWithQuorum(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/quorum/", RequestTimeout: 2 * time.Second}
	a := c.NewCoord(t, o)
	la, err := a.Grant(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := la.Claim(ctx, []byte("owner/br1"), []byte("a")); !ok || err != nil {
		t.Fatalf("Claim: %v, %v", ok, err)
	}
	start := time.Now()
	// Stop the followers: the leader is left alone (stopping a leader
	// first hands its leadership over, which takes seconds).
	leader := c.Leader()
	var wg sync.WaitGroup
	for i := range 3 {
		if i != leader {
			wg.Go(func() { c.Stop(i) })
		}
	}
	wg.Wait()
	t.Logf("stopped in %v", time.Since(start))
	select {
	case <-la.Done():
		t.Logf("lost after %v", time.Since(start))
	case <-time.After(wait):
		t.Fatal("the holder did not see its lease lost while the cluster had no quorum")
	}
	if !errors.Is(la.Err(), etcdkv.ErrLeaseLost) {
		t.Fatalf("Err: %v", la.Err())
	}
	c.Restart(t)
	t.Logf("restarted after %v", time.Since(start))
	b := c.NewCoord(t, o)
	lb, err := b.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		ok, h, err := lb.Claim(ctx, []byte("owner/br1"), []byte("b"))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			t.Logf("claimed after %v", time.Since(start))
			break
		}
		if string(h) != "a" {
			t.Fatalf("holder %q, want the old holder until its lease expires", h)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lost lease's key is still held after %v", wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

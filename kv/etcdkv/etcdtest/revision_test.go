package etcdtest_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// rangesServed is how many Range calls (reads) the cluster's members
// served so far, from their metrics. The members of an etcdtest cluster
// run in this process and share one metrics registry, so one member's
// endpoint reports them all.
func rangesServed(t *testing.T, c *etcdtest.Cluster) int64 {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(c.Endpoints[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "grpc_server_handled_total{") || !strings.Contains(l, `grpc_method="Range"`) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		n += int64(v)
		found = true
	}
	if !found {
		t.Fatal("the members' metrics count no Range calls (grpc_server_handled_total)")
	}
	return n
}

// TestViewRangeCalls checks that a View fixes its revision with its first
// read instead of a read of its own: a Get then an Iterate cost 2 Range
// calls, and a View that reads nothing costs none.
func TestViewRangeCalls(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	s := c.NewStore(t, etcdkv.Options{})
	err := s.Update(ctx, func(tx kv.Txn) error {
		for _, k := range []string{"k", "p/1", "p/2"} {
			if err := tx.Set([]byte(k), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before := rangesServed(t, c)
	if err := s.View(ctx, func(kv.Txn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := rangesServed(t, c) - before; got != 0 {
		t.Errorf("a View that reads nothing: %d Range calls, want 0", got)
	}
	before = rangesServed(t, c)
	n := 0
	err = s.View(ctx, func(tx kv.Txn) error {
		if _, err := tx.Get([]byte("k")); err != nil {
			return err
		}
		return tx.Iterate([]byte("p/"), nil, false, func(k, v []byte) (bool, error) {
			n++
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("Iterate passed %d keys, want 2", n)
	}
	if got := rangesServed(t, c) - before; got != 2 {
		t.Fatalf("a View doing a Get and an Iterate: %d Range calls, want 2", got)
	}
}

// TestViewPinsFirstRead: a View's later reads see the snapshot of its
// first read, even when another client commits in between.
func TestViewPinsFirstRead(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	a := c.NewStore(t, etcdkv.Options{Prefix: "/etcdtest/pin/"})
	b := c.NewStore(t, etcdkv.Options{Prefix: "/etcdtest/pin/"})
	set := func(s kv.Store, k, v string) {
		t.Helper()
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(k), []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	set(a, "k1", "1")
	set(a, "k2", "old")
	err := a.View(ctx, func(tx kv.Txn) error {
		if v, err := tx.Get([]byte("k1")); err != nil || string(v) != "1" {
			return fmt.Errorf("first read: k1 = %q, %v", v, err)
		}
		set(b, "k2", "new")
		if v, err := tx.Get([]byte("k2")); err != nil || string(v) != "old" {
			return fmt.Errorf("k2 = %q, %v after another client's commit, want the first read's snapshot (old)", v, err)
		}
		var got []string
		err := tx.Iterate([]byte("k"), nil, false, func(k, v []byte) (bool, error) {
			got = append(got, string(k)+"="+string(v))
			return true, nil
		})
		if err != nil {
			return err
		}
		if want := "[k1=1 k2=old]"; fmt.Sprint(got) != want {
			return fmt.Errorf("Iterate saw %v, want %s", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A View begun after the commit sees it.
	err = a.View(ctx, func(tx kv.Txn) error {
		if v, err := tx.Get([]byte("k2")); err != nil || string(v) != "new" {
			return fmt.Errorf("later View: k2 = %q, %v, want new", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestViewSeesAcknowledgedWrites: a commit acknowledged before a View
// begins is visible to it (its first read, a Get or a Prefetch, fixes its revision), while
// many Views run and writers commit, on the writer's client and on another (a second server).
func TestViewSeesAcknowledgedWrites(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	a := c.NewStore(t, etcdkv.Options{Prefix: "/etcdtest/acked/"})
	b := c.NewStore(t, etcdkv.Options{Prefix: "/etcdtest/acked/"})
	const writers, commits, readers = 2, 150, 8
	var acked [writers]atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	var checked atomic.Int64
	for w := range writers {
		wg.Go(func() {
			key := fmt.Appendf(nil, "w%d", w)
			for i := int64(1); i <= commits; i++ {
				err := a.Update(ctx, func(tx kv.Txn) error { return tx.Set(key, strconv.AppendInt(nil, i, 10)) })
				if err != nil {
					t.Error(err)
					return
				}
				acked[w].Store(i)
			}
		})
	}
	var rg sync.WaitGroup
	for r := range readers {
		s := []kv.Store{a, b}[r%2]
		rg.Go(func() {
			for !done.Load() {
				w := r % writers
				want := acked[w].Load() // acknowledged before the View begins
				err := s.View(ctx, func(tx kv.Txn) error {
					if r >= readers/2 { // half of them read through a Prefetch
						if err := tx.(kv.Prefetcher).Prefetch([][]byte{fmt.Appendf(nil, "w%d", w)}, nil); err != nil {
							return err
						}
					}
					v, err := tx.Get(fmt.Appendf(nil, "w%d", w))
					if errors.Is(err, kv.ErrNotFound) {
						v, err = []byte("0"), nil
					}
					if err != nil {
						return err
					}
					got, err := strconv.ParseInt(string(v), 10, 64)
					if err != nil {
						return err
					}
					if got < want {
						return fmt.Errorf("writer %d: View read commit %d, but %d was acknowledged before it began", w, got, want)
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				checked.Add(1)
			}
		})
	}
	wg.Wait()
	done.Store(true)
	rg.Wait()
	if checked.Load() < readers {
		t.Fatalf("only %d Views checked", checked.Load())
	}
	t.Logf("%d Views checked against %d commits", checked.Load(), writers*commits)
}

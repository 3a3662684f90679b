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

// TestViewsShareRevisionReads checks that Views that begin together share
// the read of their revision: n concurrent Views cost fewer than n Range
// calls.
func TestViewsShareRevisionReads(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	s := c.NewStore(t, etcdkv.Options{})
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	const n = 64
	before := rangesServed(t, c)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			if err := s.View(ctx, func(kv.Txn) error { return nil }); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := rangesServed(t, c) - before; got >= n {
		t.Fatalf("%d concurrent Views: %d Range calls, want fewer (shared revision reads)", n, got)
	} else {
		t.Logf("%d concurrent Views: %d Range calls", n, got)
	}
}

// TestViewSeesAcknowledgedWrites: a commit acknowledged before a View
// begins is visible to it, while many Views share revision reads and
// writers commit, on the writer's client and on another (a second server).
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

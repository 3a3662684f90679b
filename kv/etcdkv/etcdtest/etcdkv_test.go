package etcdtest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

var ctx = context.Background()

func fill(t *testing.T, s kv.Store, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i += 100 {
		err := s.Update(ctx, func(tx kv.Txn) error {
			for j := i; j < min(i+100, n); j++ {
				if err := tx.Set(fmt.Appendf(nil, "%s%04d", prefix, j), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCluster runs the kvtest suite and the etcd-specific cases that keep
// the cluster whole on one 3-member cluster.
func TestCluster(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	t.Run("Suite", func(t *testing.T) {
		kvtest.RunSuite(t, func(t *testing.T) kv.Store { return c.NewStore(t, etcdkv.Options{}) })
	})
	t.Run("Limits", func(t *testing.T) { testLimits(t, c) })
	t.Run("LimitsFromOptions", func(t *testing.T) {
		// Options below the server's flags bound the store: Limits must
		// follow them, and the suite's case checks every bound.
		o := etcdkv.Options{MaxTxnOps: 64, MaxRequestBytes: 256 << 10, Prefix: "lim/"}
		s := c.NewStore(t, o)
		if l := s.Limits(); l.Writes != 64 || l.Reads != 64 || l.Bytes > 256<<10 || l.Bytes < 250<<10 {
			t.Fatalf("Limits %+v with %+v", l, o)
		}
		for _, tc := range kvtest.Cases {
			if tc.Name == "Limits" {
				tc.Fn(t, s)
			}
		}
	})
	t.Run("PhantomConflicts", func(t *testing.T) { testPhantomConflicts(t, c) })
	t.Run("TwoClients", func(t *testing.T) { testTwoClients(t, c) })
	t.Run("Compacted", func(t *testing.T) { testCompacted(t, c) }) // last: it compacts every store's history
}

// testTwoClients: two stores on the same keys, each with its own client, as
// two servers would have: no increment is lost, and of two transactions
// that claim the same key at the same moment exactly one wins.
func testTwoClients(t *testing.T, c *etcdtest.Cluster) {
	a := c.NewStore(t, etcdkv.Options{Prefix: "/etcdtest/shared/"})
	b := c.NewStore(t, etcdkv.Options{Prefix: "/etcdtest/shared/"})
	var wg sync.WaitGroup
	for _, s := range []kv.Store{a, b, a, b} {
		wg.Go(func() {
			for i := 0; i < 15; i++ {
				err := s.Update(ctx, func(tx kv.Txn) error {
					n := 0
					v, err := tx.Get([]byte("ctr"))
					if err == nil {
						n, err = strconv.Atoi(string(v))
					}
					if err != nil && !errors.Is(err, kv.ErrNotFound) {
						return err
					}
					return tx.Set([]byte("ctr"), strconv.AppendInt(nil, int64(n+1), 10))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	err := b.View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get([]byte("ctr"))
		if err == nil && string(v) != "60" {
			t.Errorf("counter = %s after 60 increments from two clients", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	errTaken := errors.New("taken")
	for round := 0; round < 10; round++ {
		key := fmt.Appendf(nil, "claim/%d", round)
		var wins atomic.Int32
		start := make(chan struct{})
		for _, s := range []kv.Store{a, b} {
			wg.Go(func() {
				<-start
				err := s.Update(ctx, func(tx kv.Txn) error {
					if ok, err := tx.Has(key); err != nil || ok {
						return cmp.Or(err, errTaken)
					}
					return tx.Set(key, []byte("mine"))
				})
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, errTaken):
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d clients claimed the same key", round, n)
		}
	}
}

// testLimits: etcd's per-transaction limits surface as kv.ErrTxnTooBig,
// before anything is sent where the store can tell, and nothing is applied.
func testLimits(t *testing.T, c *etcdtest.Cluster) {
	s := c.NewStore(t, etcdkv.Options{})
	count := func(prefix string) int {
		n := 0
		s.View(ctx, func(tx kv.Txn) error {
			return tx.Iterate([]byte(prefix), nil, true, func(k, v []byte) (bool, error) { n++; return true, nil })
		})
		return n
	}
	t.Run("Ops", func(t *testing.T) {
		writes := func(n int) error {
			return s.Update(ctx, func(tx kv.Txn) error {
				for i := 0; i < n; i++ {
					if err := tx.Set(fmt.Appendf(nil, "ops%d/%04d", n, i), []byte("v")); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := writes(128); err != nil {
			t.Fatalf("128 writes, the server's limit: %v", err)
		}
		if err := writes(129); !errors.Is(err, kv.ErrTxnTooBig) {
			t.Fatalf("129 writes: %v, want ErrTxnTooBig", err)
		}
		if n := count("ops129/"); n != 0 {
			t.Errorf("a refused transaction stored %d keys", n)
		}
	})
	t.Run("Bytes", func(t *testing.T) {
		err := s.Update(ctx, func(tx kv.Txn) error {
			if err := tx.Set([]byte("bytes/1"), make([]byte, 1<<20)); err != nil {
				return err
			}
			return tx.Set([]byte("bytes/2"), make([]byte, 1<<20))
		})
		if !errors.Is(err, kv.ErrTxnTooBig) {
			t.Fatalf("2 MiB of values: %v, want ErrTxnTooBig", err)
		}
		if n := count("bytes/"); n != 0 {
			t.Errorf("a refused transaction stored %d keys", n)
		}
	})
	t.Run("BytesAtTheLimit", func(t *testing.T) {
		// The largest transaction Set accepts, the server accepts too: the
		// store's size estimate errs high, by little.
		const first = 1 << 20
		var second int
		err := s.Update(ctx, func(tx kv.Txn) error {
			if err := tx.Set([]byte("edge/1"), make([]byte, first)); err != nil {
				return err
			}
			lo, hi := 0, 1<<20 // Set accepts lo bytes, refuses hi
			for hi-lo > 1 {
				mid := (lo + hi) / 2
				if err := tx.Set([]byte("edge/2"), make([]byte, mid)); err == nil {
					lo = mid
				} else if !errors.Is(err, kv.ErrTxnTooBig) {
					return err
				} else {
					hi = mid
				}
			}
			second = lo
			return tx.Set([]byte("edge/2"), make([]byte, lo))
		})
		if err != nil {
			t.Fatalf("a transaction of %d bytes of values, the most Set accepts: %v", first+second, err)
		}
		if limit := 3 << 19; first+second < limit-2048 {
			t.Errorf("Set accepts only %d bytes of values, well under the server's %d", first+second, limit)
		}
		err = s.View(ctx, func(tx kv.Txn) error {
			v, err := tx.Get([]byte("edge/2"))
			if err == nil && len(v) != second {
				t.Errorf("edge/2 has %d bytes, want %d", len(v), second)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Reads", func(t *testing.T) {
		fill(t, s, "reads/", 200)
		// Reading 200 keys needs 200 compares: too many for one commit.
		err := s.Update(ctx, func(tx kv.Txn) error {
			err := tx.Iterate([]byte("reads/"), nil, true, func(k, v []byte) (bool, error) { return true, nil })
			if err != nil {
				return err
			}
			return tx.Set([]byte("reads-out"), []byte("x"))
		})
		if !errors.Is(err, kv.ErrTxnTooBig) {
			t.Fatalf("an Update reading 200 keys: %v, want ErrTxnTooBig", err)
		}
		// Without writes, nothing is committed and nothing is checked.
		err = s.Update(ctx, func(tx kv.Txn) error {
			return tx.Iterate([]byte("reads/"), nil, true, func(k, v []byte) (bool, error) { return true, nil })
		})
		if err != nil {
			t.Fatalf("a read-only Update of 200 keys: %v", err)
		}
	})
	t.Run("ServerLowerThanOptions", func(t *testing.T) {
		// A store told the server takes 256 operations learns otherwise
		// from the server, and reports the same error.
		s2 := c.NewStore(t, etcdkv.Options{MaxTxnOps: 256})
		err := s2.Update(ctx, func(tx kv.Txn) error {
			for i := 0; i < 200; i++ {
				if err := tx.Set(fmt.Appendf(nil, "srv/%04d", i), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		})
		if !errors.Is(err, kv.ErrTxnTooBig) {
			t.Fatalf("200 writes to a server taking 128: %v, want ErrTxnTooBig", err)
		}
	})
}

// testPhantomConflicts: unlike the contract's minimum, a key inserted into
// a range an Update iterated makes it retry.
func testPhantomConflicts(t *testing.T, c *etcdtest.Cluster) {
	s := c.NewStore(t, etcdkv.Options{})
	fill(t, s, "p/", 3)
	for _, tc := range []struct {
		name, insert string
		stopEarly    bool
		wantAttempts int
	}{
		{"InsideRange", "p/0001a", false, 2},
		{"AfterEarlyStop", "p/0002a", true, 1}, // beyond what was read
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempts := 0
			err := s.Update(ctx, func(tx kv.Txn) error {
				attempts++
				n := 0
				err := tx.Iterate([]byte("p/"), nil, true, func(k, v []byte) (bool, error) {
					n++
					return !tc.stopEarly || n < 2, nil
				})
				if err != nil {
					return err
				}
				if attempts == 1 {
					if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(tc.insert), nil) }); err != nil {
						return err
					}
				}
				return tx.Set([]byte("count"), fmt.Append(nil, n))
			})
			if err != nil || attempts != tc.wantAttempts {
				t.Fatalf("%v after %d attempts, want %d", err, attempts, tc.wantAttempts)
			}
		})
	}
}

// testCompacted: a snapshot older than the cluster's compacted history
// fails with ErrCompacted; an Update caught by a compaction starts over.
func testCompacted(t *testing.T, c *etcdtest.Cluster) {
	s := c.NewStore(t, etcdkv.Options{})
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	compact := func() {
		resp, err := cli.Get(ctx, "any")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, s, "c/", 2)
	snap := s.NewSnapshot()
	defer snap.Discard()
	fill(t, s, "d/", 1) // a newer revision to compact up to
	compact()
	if _, err := snap.Get([]byte("c/0000")); !errors.Is(err, etcdkv.ErrCompacted) {
		t.Fatalf("read of a compacted snapshot: %v, want ErrCompacted", err)
	}
	attempts := 0
	err = s.Update(ctx, func(tx kv.Txn) error {
		attempts++
		if _, err := tx.Get([]byte("c/0000")); err != nil { // fixes the revision
			return err
		}
		if attempts == 1 {
			fill(t, s, "e/", 1)
			compact()
		}
		v, err := tx.Get([]byte("c/0001"))
		if err != nil {
			return err
		}
		return tx.Set([]byte("out"), v)
	})
	if err != nil || attempts != 2 {
		t.Fatalf("Update caught by a compaction: %v after %d attempts, want success after 2", err, attempts)
	}
}

// TestMemberLoss: with one member of three down the store goes on; with
// two down a commit fails with ErrUnknownOutcome (it was sent, and no
// answer came) within the request timeout, and once the members return it
// turns out applied whole or not at all.
func TestMemberLoss(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	s := c.NewStore(t, etcdkv.Options{Prefix: "/loss/"})
	fill(t, s, "m/", 10)
	c.Stop(0)
	fill(t, s, "n/", 10)
	err := s.View(ctx, func(tx kv.Txn) error {
		_, err := tx.Get([]byte("n/0009"))
		return err
	})
	if err != nil {
		t.Fatalf("read with one member of three down: %v", err)
	}
	q := c.NewStore(t, etcdkv.Options{Prefix: "/loss/", RequestTimeout: 2 * time.Second})
	err = q.Update(ctx, func(tx kv.Txn) error {
		if _, err := tx.Get([]byte("m/0001")); err != nil {
			return err
		}
		c.Stop(1) // the cluster loses its quorum before the commit
		if err := tx.Set([]byte("m/0001"), []byte("lost?")); err != nil {
			return err
		}
		return tx.Set([]byte("m/0002"), []byte("lost?"))
	})
	if !errors.Is(err, kv.ErrUnknownOutcome) {
		t.Fatalf("commit without quorum: %v, want ErrUnknownOutcome", err)
	}
	// By now (a request timeout later) the last member knows it has no
	// leader: it refuses a commit at once, which is a clean failure, not
	// an unknown outcome.
	err = q.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("m/0003"), []byte("refused")) })
	if !errors.Is(err, etcdkv.ErrUnavailable) || errors.Is(err, kv.ErrUnknownOutcome) {
		t.Fatalf("commit to a member without a leader: %v, want ErrUnavailable", err)
	}
	// Back to three members: the commit was applied whole or not at all.
	c.Restart(t)
	err = s.View(ctx, func(tx kv.Txn) error {
		v1, err := tx.Get([]byte("m/0001"))
		if err != nil {
			return err
		}
		v2, err := tx.Get([]byte("m/0002"))
		if err != nil {
			return err
		}
		if string(v1) != string(v2) {
			t.Errorf("a commit of unknown outcome was applied in part: m/0001=%q m/0002=%q", v1, v2)
		}
		if v3, err := tx.Get([]byte("m/0003")); err != nil || string(v3) != "v" {
			t.Errorf("m/0003 after a refused commit: %q, %v; want the value from before", v3, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read after the members returned: %v", err)
	}
}

// TestRestart: what a store acknowledged survives a restart of the whole
// cluster, read through the same store (its client reconnects) and a new
// one.
func TestRestart(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	s := c.NewStore(t, etcdkv.Options{Prefix: "/restart/"})
	fill(t, s, "r/", 250)
	if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Delete([]byte("r/0007")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	c.Restart(t)
	for _, st := range []kv.Store{s, c.NewStore(t, etcdkv.Options{Prefix: "/restart/"})} {
		n := 0
		err := st.View(ctx, func(tx kv.Txn) error {
			return tx.Iterate([]byte("r/"), nil, false, func(k, v []byte) (bool, error) {
				if string(k) == "r/0007" {
					return false, fmt.Errorf("deleted key %s is back", k)
				}
				n++
				return true, nil
			})
		})
		if err != nil || n != 249 {
			t.Fatalf("after a restart of the cluster: %d keys, %v; want 249", n, err)
		}
	}
}

// TestNoSpace: a cluster over its backend quota refuses writes with
// kv.ErrNoSpace; reads go on.
func TestNoSpace(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{Members: 1, QuotaBackendBytes: 4 << 20})
	s := c.NewStore(t, etcdkv.Options{})
	val := make([]byte, 512<<10)
	var err error
	i := 0
	for ; i < 64 && err == nil; i++ {
		err = s.Update(ctx, func(tx kv.Txn) error { return tx.Set(fmt.Appendf(nil, "q/%d", i), val) })
	}
	if !errors.Is(err, kv.ErrNoSpace) {
		t.Fatalf("after %d writes of 512 KiB to a 4 MiB quota: %v, want ErrNoSpace", i, err)
	}
	if err := s.View(ctx, func(tx kv.Txn) error { _, err := tx.Get([]byte("q/0")); return err }); err != nil {
		t.Fatalf("read from a full cluster: %v", err)
	}
}

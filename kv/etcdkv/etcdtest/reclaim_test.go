package etcdtest_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestReclaimKeepsOtherReaders: two clients on one prefix, as two servers
// would have. While A holds a View and a Snapshot open, B overwrites the
// keys they read and runs ReclaimSpace again and again; A's reads still
// see the old values, and a watch A starts afterwards from before B's
// writes gets every change. Then, with a short retention, the history goes
// once its revision marks are old enough: a snapshot from before the
// newest old mark fails with ErrCompacted, one from after it still reads.
func TestReclaimKeepsOtherReaders(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/etcdtest/gc/"}
	a, b, wa := c.NewStore(t, o), c.NewStore(t, o), c.NewCoord(t, o)
	fill(t, a, "k/", 10)
	rev, err := wa.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	overwrite := func(v string) {
		t.Helper()
		err := b.Update(ctx, func(tx kv.Txn) error {
			for i := range 10 {
				if err := tx.Set(fmt.Appendf(nil, "k/%04d", i), []byte(v)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(tx kv.Txn, want string) error {
		n := 0
		err := tx.Iterate([]byte("k/"), nil, false, func(k, v []byte) (bool, error) {
			if string(v) != want {
				return false, fmt.Errorf("%s = %q, want %q", k, v, want)
			}
			n++
			return true, nil
		})
		if err == nil && n != 10 {
			err = fmt.Errorf("read %d keys, want 10", n)
		}
		return err
	}
	const rounds = 3
	snap := a.NewSnapshot()
	err = a.View(ctx, func(tx kv.Txn) error {
		if err := readAll(tx, "v"); err != nil {
			return err
		}
		for i := range rounds {
			overwrite(fmt.Sprintf("w%d", i))
			if _, err := b.ReclaimSpace(ctx); err != nil {
				t.Fatalf("ReclaimSpace %d: %v", i, err)
			}
		}
		if err := readAll(snap, "v"); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		return readAll(tx, "v")
	})
	snap.Discard()
	if err != nil {
		t.Fatalf("a View held open while another client reclaimed space: %v", err)
	}
	events := 0
	errEnough := errors.New("enough")
	err = wa.Watch(ctx, []byte("k/"), rev+1, func(e etcdkv.Event) error {
		if events++; events == rounds*10 {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("a watch from before the other client's ReclaimSpace: %v after %d events", err, events)
	}

	// Aged marks: with a 2 s retention, each ReclaimSpace after a 2 s
	// wait compacts up to the mark the one before it recorded.
	const retention = 2 * time.Second
	short := c.NewStore(t, etcdkv.Options{Prefix: o.Prefix, Retention: retention})
	old := a.NewSnapshot()
	defer old.Discard()
	overwrite("x")
	time.Sleep(retention)
	if _, err := short.ReclaimSpace(ctx); err != nil { // records a mark after old
		t.Fatal(err)
	}
	if err := readAll(old, "w2"); err != nil {
		t.Fatalf("a snapshot from before the newest mark, before that mark aged: %v", err)
	}
	recent := a.NewSnapshot()
	defer recent.Discard()
	overwrite("y")
	time.Sleep(retention)
	if _, err := short.ReclaimSpace(ctx); err != nil { // compacts up to that mark
		t.Fatal(err)
	}
	if err := readAll(old, "w2"); !errors.Is(err, etcdkv.ErrCompacted) {
		t.Fatalf("a snapshot older than an aged mark after ReclaimSpace: %v, want ErrCompacted", err)
	}
	if err := readAll(recent, "x"); err != nil {
		t.Fatalf("a snapshot newer than the mark compacted to: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	marks, err := cli.Get(ctx, etcdkv.MarkPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(marks.Kvs) != 1 {
		t.Fatalf("%d revision marks after a compaction, want 1 (the newest)", len(marks.Kvs))
	}
}

package etcdtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

func BenchmarkEtcd(b *testing.B) {
	c := etcdtest.StartCluster(b, etcdtest.Options{})
	kvtest.RunBenchmarks(b, func(b *testing.B) kv.Store { return c.NewStore(b, etcdkv.Options{}) })
}

// BenchmarkEtcdTLS is BenchmarkEtcd with the members serving clients over
// TLS and requiring a client certificate: the cost of etcds://.
func BenchmarkEtcdTLS(b *testing.B) {
	certs := etcdtest.NewCerts(b)
	c := etcdtest.StartCluster(b, etcdtest.Options{TLS: &certs})
	kvtest.RunBenchmarks(b, func(b *testing.B) kv.Store { return c.NewStore(b, etcdkv.Options{}) })
}

// BenchmarkWatch measures how long a change takes to reach a watcher on
// another client: one op is an Update of one key under the watched prefix
// and the wait for its event.
func BenchmarkWatch(b *testing.B) {
	c := etcdtest.StartCluster(b, etcdtest.Options{})
	o := etcdkv.Options{Prefix: "/watchbench/"}
	s, w := c.NewStore(b, o), c.NewCoord(b, o)
	rev, err := w.Revision(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	events, done := make(chan etcdkv.Event, 1), make(chan error, 1)
	go func() {
		done <- w.Watch(wctx, []byte("inv/"), rev+1, func(e etcdkv.Event) error { events <- e; return nil })
	}()
	defer func() { cancel(); <-done }()
	for i := 0; b.Loop(); i++ {
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("inv/k"), fmt.Appendf(nil, "%d", i)) }); err != nil {
			b.Fatal(err)
		}
		select {
		case <-events:
		case err := <-done:
			b.Fatalf("the watch ended: %v", err)
		}
	}
}

package etcdtest_test

import (
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

package etcdtest_test

import (
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestSpaceIsTheQuota: an etcd store reports the cluster's
// --quota-backend-bytes as its space, what its database holds subtracted
// as free, and says that it is a quota, not a local disk.
func TestSpaceIsTheQuota(t *testing.T) {
	const quota = 96 << 20
	c := etcdtest.StartCluster(t, etcdtest.Options{Members: 1, QuotaBackendBytes: quota})
	s := c.NewStore(t, etcdkv.Options{})
	fill(t, s, "k", 500)
	r, ok := s.(kv.SpaceReporter)
	if !ok {
		t.Fatalf("%T does not report its space", s)
	}
	sp, err := r.Space()
	if err != nil {
		t.Fatal(err)
	}
	size, err := s.Size()
	if err != nil {
		t.Fatal(err)
	}
	if !sp.Quota || sp.TotalBytes != quota || sp.FreeBytes != quota-uint64(size) || sp.AvailBytes != sp.FreeBytes {
		t.Fatalf("Space() = %+v with a database of %d bytes; want the quota %d, %d free", sp, size, quota, quota-size)
	}
	if sp.TotalFiles != sp.TotalBytes || sp.FreeFiles != sp.FreeBytes {
		t.Fatalf("Space() = %+v: the file counts are not the quota's bytes", sp)
	}
	s.Close()
	if _, err := r.Space(); err == nil {
		t.Fatal("Space() after Close succeeded")
	}
}

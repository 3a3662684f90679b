package branches_test

import (
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// sharedStore is one store served by several Managers, as several servers
// would serve it: one etcd cluster and key prefix, one blob store, and a
// lease of its own for each Manager.
type sharedStore struct {
	t      *testing.T
	c      *etcdtest.Cluster
	prefix string
	bucket blobs.Store
}

// newSharedStore starts a 3-member etcd cluster for a store under prefix
// with its blocks in an in-memory blob store.
func newSharedStore(t *testing.T, prefix string) *sharedStore {
	return &sharedStore{t: t, c: etcdtest.StartCluster(t, etcdtest.Options{}), prefix: prefix, bucket: blobs.NewMem()}
}

// open opens another Manager of the store, closed when the test ends.
func (s *sharedStore) open() *branches.Manager {
	s.t.Helper()
	o := etcdkv.Options{Prefix: s.prefix}
	m, err := branches.Open(context.Background(), branches.Options{Store: s.c.NewStore(s.t, o), ReclaimDelay: -1,
		FS: cowfs.Options{Blobs: s.bucket, Leases: s.c.NewCoord(s.t, o).ServerLease(0)}})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { m.Close() })
	return m
}

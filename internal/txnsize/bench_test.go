package txnsize_test

import (
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// BenchmarkBranchOps times fork, fast-path commit (of a branch with one new
// file) and abort through a branches.Manager, in process, on the Badger
// store and on a 3-member etcd cluster, in one run:
//
//	go test -run '^$' -bench BranchOps -benchtime 100x ./internal/txnsize/
func BenchmarkBranchOps(b *testing.B) {
	for _, backend := range []struct {
		name string
		open func(b *testing.B) kv.Store
	}{
		{"badger", func(b *testing.B) kv.Store { return kvtest.NewDiskStore(b) }},
		{"etcd", func(b *testing.B) kv.Store {
			return etcdtest.StartCluster(b, etcdtest.Options{}).NewStore(b, etcdkv.Options{})
		}},
	} {
		b.Run("store="+backend.name, func(b *testing.B) {
			m := branchestest.NewManager(b, branches.Options{Store: backend.open(b), ReclaimDelay: -1})
			n := 0
			fork := func() string {
				n++
				name := fmt.Sprintf("b%d", n)
				if _, err := m.Fork(ctx, "main", name); err != nil {
					b.Fatal(err)
				}
				return name
			}
			b.Run("op=fork", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					name := fork()
					// Abort it: a commit rewrites the record of every
					// live sibling.
					b.StopTimer()
					if _, err := m.Abort(ctx, name); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
			b.Run("op=commit", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					name := fork()
					fs, _, err := m.View(name)
					if err != nil {
						b.Fatal(err)
					}
					f, err := fs.Billy().Create("f")
					if err == nil {
						_, err = f.Write([]byte("data"))
					}
					if err == nil {
						err = f.Close()
					}
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if res, err := m.Commit(ctx, name); err != nil || !res.FastPath {
						b.Fatalf("commit: %+v, %v", res, err)
					}
				}
			})
			b.Run("op=abort", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					name := fork()
					b.StartTimer()
					if _, err := m.Abort(ctx, name); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

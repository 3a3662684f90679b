package txnsize_test

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/txnsize"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// TestBranchesOnEtcd runs the branch lifecycle on a 3-member etcd cluster:
// what the report says fits works, and reclaim and a merge work at any
// size.
func TestBranchesOnEtcd(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	const prefix = "/txnsize/branches/"
	rec := txnsize.New(c.NewStore(t, etcdkv.Options{Prefix: prefix}))
	e := &env{t: t, rec: rec, m: branchestest.NewManager(t, branches.Options{Store: rec, ReclaimDelay: -1})}

	// A 1 MiB NFS WRITE, read back.
	e.fork("main", "w")
	fs := e.view("w")
	a, err := fs.Create(cowfs.RootIno, "big", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := randomData(1<<20, 4)
	if _, err := fs.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatalf("1 MiB write on etcd: %v", err)
	}
	if got := e.read("w", "big"); got != string(data) {
		t.Fatalf("1 MiB file read back as %d bytes, not what was written", len(got))
	}
	// Fast-path commit of 20 files, then a merge of 10.
	e.files("w", "d", 20, 4096)
	e.commit("w")
	e.fork("main", "m")
	e.files("m", "e", 10, 4096)
	e.files("main", "x", 1, 100)
	if res := e.commit("m"); res.FastPath || res.Changes == 0 {
		t.Fatalf("commit of m: %+v, want a merge", res)
	}
	if got := len(e.read("main", "e/f00009")); got != 4096 {
		t.Fatalf("merged file has %d bytes", got)
	}
	// Abort and reclaim of a small branch.
	e.fork("main", "gone")
	e.files("gone", "g", 10, 4096)
	if _, err := e.m.Abort(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Reclaim(ctx); err != nil {
		t.Fatalf("reclaim on etcd: %v", err)
	}
	// Abort and reclaim of a branch whose keys and blocks are far more
	// than one etcd transaction holds: reclaim batches by the store's
	// Limits.
	e.fork("main", "gone2")
	e.files("gone2", "g", 200, 4096)
	if _, err := e.m.Abort(ctx, "gone2"); err != nil {
		t.Fatal(err)
	}
	rs, err := e.m.Reclaim(ctx)
	if err != nil {
		t.Fatalf("reclaim of 200 files on etcd: %v", err)
	}
	if rs.Keys < 600 || rs.Blocks <= 128 { // more than one transaction of each
		t.Fatalf("reclaim of 200 files on etcd deleted %+v", rs)
	}

	// A merge of 1,000 new files (about 3,000 writes): staged in batches
	// sized by the store's Limits, published in one small transaction.
	e.fork("main", "huge")
	e.files("huge", "h", 1000, 100)
	e.files("main", "y", 1, 100)
	res, err := e.m.Commit(ctx, "huge")
	if err != nil {
		t.Fatalf("merge of 1,000 files on etcd: %v", err)
	}
	if res.FastPath || res.Changes < 1000 {
		t.Fatalf("commit of huge: %+v, want a merge of 1,000 files", res)
	}
	if got := len(e.read("main", "h/f00999")); got != 100 {
		t.Errorf("after the merge main's h/f00999 has %d bytes", got)
	}
	if got := len(e.read("main", "e/f00009")); got != 4096 {
		t.Errorf("after the merge main's e/f00009 has %d bytes", got)
	}

	// A commit with 200 live siblings invalidates them in one write.
	for i := range 200 {
		e.fork("main", fmt.Sprintf("s%03d", i))
	}
	e.fork("main", "winner")
	e.files("winner", "w", 1, 100)
	if res := e.commit("winner"); len(res.Invalidated) != 200 {
		t.Fatalf("commit with 200 live siblings invalidated %d", len(res.Invalidated))
	}
	if _, _, err := e.m.View("s123"); !errors.Is(err, branches.ErrInvalidated) {
		t.Fatalf("a sibling after the commit: %v, want invalidated", err)
	}

	// First commit wins across servers: a second Manager on its own etcd
	// client over the same keys commits a sibling at the same time.
	e.fork("main", "a")
	e.fork("main", "b")
	e.files("a", "a", 5, 100)
	e.files("b", "b", 5, 100)
	m2 := branchestest.NewManager(t, branches.Options{Store: c.NewStore(t, etcdkv.Options{Prefix: prefix}), ReclaimDelay: -1})
	var wg sync.WaitGroup
	var errA, errB error
	wg.Add(2)
	go func() { defer wg.Done(); _, errA = e.m.Commit(ctx, "a") }()
	go func() { defer wg.Done(); _, errB = m2.Commit(ctx, "b") }()
	wg.Wait()
	if (errA == nil) == (errB == nil) {
		t.Fatalf("concurrent commits of a and b on two servers: %v and %v, want exactly one to win", errA, errB)
	}
	winner, loser, lerr := "a", "b", errB
	if errA != nil {
		winner, loser, lerr = "b", "a", errA
	}
	if !errors.Is(lerr, branches.ErrInvalidated) {
		t.Errorf("the losing commit of %s: %v, want ErrInvalidated", loser, lerr)
	}
	m3 := branchestest.NewManager(t, branches.Options{Store: c.NewStore(t, etcdkv.Options{Prefix: prefix}), ReclaimDelay: -1})
	e3 := &env{t: t, m: m3}
	if got := len(e3.read("main", winner+"/f00004")); got != 100 {
		t.Errorf("the winner's file in main has %d bytes", got)
	}
	if got := e3.read("main", loser+"/f00000"); got != "<missing>" {
		t.Errorf("the loser's commit reached main: %d bytes", len(got))
	}
}

// read returns p's content in branch, or "<missing>".
func (e *env) read(branch, p string) string {
	e.t.Helper()
	f, err := e.view(branch).Billy().Open(p)
	if err != nil {
		return "<missing>"
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		e.t.Fatal(fmt.Errorf("read %s in %s: %w", p, branch, err))
	}
	return string(b)
}

package txnsize_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/txnsize"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// etcd's default limits per transaction.
const (
	etcdMaxOps   = 128
	etcdMaxBytes = 3 << 19 // 1.5 MiB
	etcdOpBytes  = 24      // framing per operation, as kv/etcdkv estimates
)

var ctx = context.Background()

func TestRecorder(t *testing.T) {
	r := txnsize.New(kvtest.NewStore(t))
	err := r.Update(ctx, func(tx kv.Txn) error {
		for _, k := range []string{"a", "b"} {
			if err := tx.Set([]byte(k), []byte("12345")); err != nil {
				return err
			}
		}
		return tx.Delete([]byte("c"))
	})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Update(ctx, func(tx kv.Txn) error {
		tx.Get([]byte("x"))
		tx.Has([]byte("a"))
		if err := tx.Set([]byte("y"), nil); err != nil {
			return err
		}
		tx.Get([]byte("y")) // its own write: no read
		return tx.Iterate([]byte("a"), nil, true, func(k, v []byte) (bool, error) { return true, nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Update(ctx, func(tx kv.Txn) error { _, err := tx.Has([]byte("a")); return err }) // no writes: not recorded
	got := fmt.Sprint(r.Take())
	if want := "[{3 13 0 0} {1 1 2 1}]"; got != want {
		t.Errorf("recorded %s, want %s", got, want)
	}
	if n := len(r.Take()); n != 0 {
		t.Errorf("Take after Take returned %d transactions", n)
	}
}

// randomData returns incompressible bytes: all-zero blocks would be stored
// as holes. Streams of one seed share their start, and blocks are stored
// once by content, so writes meant to be new use seeds of their own.
func randomData(n int, seed byte) []byte {
	p := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(p)
	return p
}

// summary of the transactions of one operation.
type summary struct {
	name                         string
	txns                         int
	maxWrites, maxCmps, sumWrite int
	maxBytes                     int64
}

func summarize(name string, txns []txnsize.Txn) summary {
	s := summary{name: name, txns: len(txns)}
	for _, t := range txns {
		s.maxWrites = max(s.maxWrites, t.Writes)
		s.maxCmps = max(s.maxCmps, t.Compares())
		s.sumWrite += t.Writes
		req := t.Bytes + int64((t.Writes+t.Compares())*etcdOpBytes)
		s.maxBytes = max(s.maxBytes, req)
	}
	return s
}

func (s summary) verdict() string {
	var over []string
	if s.maxWrites > etcdMaxOps {
		over = append(over, "writes")
	}
	if s.maxCmps > etcdMaxOps {
		over = append(over, "compares")
	}
	if s.maxBytes > etcdMaxBytes {
		over = append(over, "bytes")
	}
	if len(over) == 0 {
		return "fits"
	}
	return "over: " + strings.Join(over, ", ")
}

type env struct {
	t   *testing.T
	rec *txnsize.Recorder
	m   *branches.Manager
}

// newEnv runs a Manager over a Badger store that reports and enforces
// etcd's default limits, so operations that batch by the store's Limits
// batch as they would on etcd.
func newEnv(t *testing.T) *env {
	return newEnvOn(t, kvtest.Limited(kvtest.NewDiskStore(t), kv.Limits{
		Writes: etcdMaxOps, Reads: etcdMaxOps, Bytes: etcdMaxBytes - 512, OpBytes: etcdOpBytes}))
}

func newEnvOn(t *testing.T, st kv.Store) *env {
	rec := txnsize.New(st)
	m := branchestest.NewManager(t, branches.Options{Store: rec, ReclaimDelay: -1})
	return &env{t: t, rec: rec, m: m}
}

func (e *env) view(branch string) *cowfs.View {
	fs, _, err := e.m.View(branch)
	if err != nil {
		e.t.Fatal(err)
	}
	return fs
}

// files creates n files of size bytes under dir in branch.
func (e *env) files(branch, dir string, n, size int) {
	e.t.Helper()
	b := e.view(branch).Billy()
	if err := b.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	data := randomData(size, 200)
	for i := 0; i < n; i++ {
		data[0], data[1] = byte(i), byte(i>>8) // distinct blocks
		f, err := b.Create(fmt.Sprintf("%s/f%05d", dir, i))
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			e.t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) fork(parent, name string) {
	e.t.Helper()
	if _, err := e.m.Fork(ctx, parent, name); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) commit(name string) branches.CommitResult {
	e.t.Helper()
	res, err := e.m.Commit(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// measure runs op and summarizes the transactions it committed.
func (e *env) measure(name string, op func()) summary {
	e.t.Helper()
	e.rec.Take()
	op()
	return summarize(name, e.rec.Take())
}

// TestReport runs typical operations and reports the largest transaction
// of each against etcd's limits.
func TestReport(t *testing.T) {
	var rows []summary
	add := func(s summary) { rows = append(rows, s) }

	// File operations, as the NFS server runs them.
	e := newEnv(t)
	e.fork("main", "w")
	fs := e.view("w")
	var ino cowfs.InodeID
	add(e.measure("NFS CREATE of a file", func() {
		a, err := fs.Create(cowfs.RootIno, "big", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ino = a.Ino
	}))
	for _, size := range []int{64 << 10, 1 << 20} {
		name := fmt.Sprintf("NFS WRITE of %d KiB (new data)", size>>10)
		add(e.measure(name, func() {
			if _, err := fs.WriteAt(ino, randomData(size, byte(size>>10)), 0); err != nil {
				t.Fatal(err)
			}
		}))
		data := randomData(size, byte(size>>10)+1)
		add(e.measure(fmt.Sprintf("NFS WRITE of %d KiB (overwrite)", size>>10), func() {
			if _, err := fs.WriteAt(ino, data, 0); err != nil {
				t.Fatal(err)
			}
		}))
	}
	add(e.measure("fork", func() { e.fork("main", "f") }))

	for _, n := range []int{1, 10, 100, 1000} {
		e := newEnv(t)
		e.fork("main", "a")
		e.files("a", "d", n, 4096)
		add(e.measure(fmt.Sprintf("commit, fast path, %d new files", n), func() {
			if res := e.commit("a"); !res.FastPath {
				t.Fatalf("commit of a with main unchanged took the merge path")
			}
		}))
		// A merge: main changed since b forked.
		e.fork("main", "b")
		e.files("b", "e", n, 4096)
		e.files("main", "m", 1, 4096)
		add(e.measure(fmt.Sprintf("commit, merge, %d new files", n), func() {
			if res := e.commit("b"); res.FastPath {
				t.Fatalf("commit of b after a's took the fast path")
			}
		}))
	}

	for _, n := range []int{10, 200} {
		e := newEnv(t)
		for i := 0; i < n; i++ {
			e.fork("main", fmt.Sprintf("s%d", i))
		}
		e.fork("main", "winner")
		e.files("winner", "d", 1, 4096)
		add(e.measure(fmt.Sprintf("commit, fast path, %d live siblings", n), func() {
			if res := e.commit("winner"); len(res.Invalidated) != n {
				t.Fatalf("commit invalidated %d siblings, want %d", len(res.Invalidated), n)
			}
		}))
	}

	e = newEnv(t)
	e.fork("main", "p")
	for i := 0; i < 200; i++ {
		e.fork("p", fmt.Sprintf("k%d", i))
	}
	add(e.measure("abort of a branch with 200 children", func() {
		if res, err := e.m.Abort(ctx, "p"); err != nil || len(res.Aborted) != 201 {
			t.Fatalf("abort of p: %+v, %v", res, err)
		}
	}))

	e = newEnv(t)
	e.fork("main", "x")
	e.files("x", "d", 1000, 4096)
	add(e.measure("abort of a branch of 1000 files", func() {
		if _, err := e.m.Abort(ctx, "x"); err != nil {
			t.Fatal(err)
		}
	}))
	add(e.measure("reclaim after that abort", func() {
		if _, err := e.m.Reclaim(ctx); err != nil {
			t.Fatal(err)
		}
	}))

	var out strings.Builder
	fmt.Fprintf(&out, "| operation | txns | max writes | max compares | max bytes | etcd (128 ops, 1.5 MiB) |\n|---|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&out, "| %s | %d | %d | %d | %d | %s |\n", r.name, r.txns, r.maxWrites, r.maxCmps, r.maxBytes, r.verdict())
		if r.txns == 0 {
			t.Errorf("%s committed no transaction", r.name)
		}
	}
	t.Log("\n" + out.String())
}

package branches_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestReclaimWithinStoreLimits: reclamation deletes a dead branch's layer
// and checkpoints, and the blocks only it referenced, in batches sized by
// the store's Limits, so it works on a
// store that takes 128 writes per transaction (etcd's default) when the
// branch holds many more keys and checkpoints than that.
func TestReclaimWithinStoreLimits(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), kv.Limits{Writes: 128, Reads: math.MaxInt, Bytes: 1<<20 + 1<<19 - 512, OpBytes: 24})
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	must(m.Fork(ctx, "main", "kid"))(t)
	for i := range 150 {
		// An inode, an entry and a block of content each.
		write(t, m, "kid", fmt.Sprintf("f%03d", i), strings.Repeat(fmt.Sprintf("file %d;", i), 200))
	}
	for i := range 150 {
		must(m.Checkpoint(ctx, "kid", fmt.Sprintf("cp%03d", i)))(t)
	}
	must(m.Abort(ctx, "kid"))(t)
	rs, err := m.Reclaim(ctx)
	if err != nil {
		t.Fatalf("Reclaim on a store of 128 writes per transaction: %v", err)
	}
	if rs.Checkpoints != 150 || rs.Keys < 300 || rs.Blocks < 150 {
		t.Fatalf("Reclaim deleted %+v; want the 150 checkpoints, at least 300 keys and 150 blocks", rs)
	}
}

// etcdLimits are etcd's default limits, as etcdkv reports them.
var etcdLimits = kv.Limits{Writes: 128, Reads: 128, Bytes: 1<<20 + 1<<19 - 512, OpBytes: 24}

// TestMergeWithinStoreLimits: a merge commit of 1,000 new files, about
// 3,000 writes, stages them in batches sized by the store's Limits, so it
// commits on a store that takes etcd's 128 writes per transaction.
func TestMergeWithinStoreLimits(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), etcdLimits)
	m := newManagerOpts(t, branches.Options{Store: st})
	must(m.Fork(ctx, "main", "kid"))(t)
	for i := range 1000 {
		write(t, m, "kid", fmt.Sprintf("d/f%04d", i), fmt.Sprintf("file %d", i))
	}
	write(t, m, "main", "other", "main changed") // so the commit merges
	res, err := m.Commit(ctx, "kid")
	if err != nil {
		t.Fatalf("merge of 1,000 files on a store of 128 writes per transaction: %v", err)
	}
	if res.FastPath || res.Changes < 1000 {
		t.Fatalf("commit: %+v, want a merge of at least 1,000 changes", res)
	}
	for _, i := range []int{0, 517, 999} {
		if got, want := read(t, m, "main", fmt.Sprintf("d/f%04d", i)), fmt.Sprintf("file %d", i); got != want {
			t.Errorf("main's d/f%04d = %q, want %q", i, got, want)
		}
	}
	if got := read(t, m, "main", "other"); got != "main changed" {
		t.Errorf("main's other = %q", got)
	}
}

// TestFoldWithinStoreLimits: folding a layer of 300 files (about 900
// keys, each inode record also reading the layer below) copies it in
// batches sized by the store's Limits, writes and reads both.
func TestFoldWithinStoreLimits(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), etcdLimits)
	m := newManagerOpts(t, branches.Options{Store: st})
	// Each fork freezes main's top: ten rounds make main's stack 11 deep.
	for r := range 10 {
		n := 1
		if r == 9 {
			n = 300 // the layer the fold copies first
		}
		for i := range n {
			write(t, m, "main", fmt.Sprintf("r%d/f%03d", r, i), fmt.Sprintf("round %d file %d", r, i))
		}
		must(m.Fork(ctx, "main", fmt.Sprintf("c%d", r)))(t)
		must(m.Abort(ctx, fmt.Sprintf("c%d", r)))(t)
	}
	// The aborted children's tops reference main's layers until reclaimed.
	must(m.Reclaim(ctx))(t)
	n, err := m.Fold(ctx)
	if err != nil {
		t.Fatalf("fold on a store of 128 writes and reads per transaction: %v", err)
	}
	if n == 0 {
		t.Fatal("nothing folded")
	}
	for r := range 10 {
		if got, want := read(t, m, "main", fmt.Sprintf("r%d/f000", r)), fmt.Sprintf("round %d file 0", r); got != want {
			t.Errorf("after the fold main's r%d/f000 = %q, want %q", r, got, want)
		}
	}
	if got := read(t, m, "main", "r9/f299"); got != "round 9 file 299" {
		t.Errorf("after the fold main's r9/f299 = %q", got)
	}
}

// TestFoldTruncatedFileWithinStoreLimits: folding a layer that truncated
// a file of 300 blocks held by the layer below drops the 299 hidden
// blocks and trims the one straddling the new end, in transactions the
// store takes.
func TestFoldTruncatedFileWithinStoreLimits(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), etcdLimits)
	m := newManagerOpts(t, branches.Options{Store: st, FS: cowfs.Options{BlockSize: 4096}})
	big := make([]byte, 300*4096)
	for i := range big {
		big[i] = byte(i * 7 / 3)
	}
	for r := range 10 {
		switch r {
		case 8:
			// In writes of 64 KiB: one transaction each.
			fs, _, err := m.View("main")
			if err != nil {
				t.Fatal(err)
			}
			f, err := fs.Billy().Create("big")
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(big); off += 64 << 10 {
				if _, err := f.Write(big[off:min(off+64<<10, len(big))]); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
		case 9:
			fs, _, err := m.View("main")
			if err != nil {
				t.Fatal(err)
			}
			f, err := fs.Billy().OpenFile("big", os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(1000); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			write(t, m, "main", fmt.Sprintf("f%d", r), "x")
		}
		must(m.Fork(ctx, "main", fmt.Sprintf("c%d", r)))(t)
		must(m.Abort(ctx, fmt.Sprintf("c%d", r)))(t)
	}
	must(m.Reclaim(ctx))(t)
	if n, err := m.Fold(ctx); err != nil || n == 0 {
		t.Fatalf("fold on a store of 128 writes and reads per transaction: %d layers, %v", n, err)
	}
	if got := read(t, m, "main", "big"); got != string(big[:1000]) {
		t.Errorf("after the fold big has %d bytes, want its first 1,000", len(got))
	}
}

// TestAbortWithinStoreLimits: aborting a branch with 150 children and a
// grandchild, two writes each, flips their records in batches the store
// takes, descendants before ancestors; every one is gone afterwards, also
// for a Manager opened again.
func TestAbortWithinStoreLimits(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), etcdLimits)
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	must(m.Fork(ctx, "main", "top"))(t)
	for i := range 150 {
		must(m.Fork(ctx, "top", fmt.Sprintf("k%03d", i)))(t)
	}
	must(m.Fork(ctx, "k042", "grandchild"))(t)
	res, err := m.Abort(ctx, "top")
	if err != nil {
		t.Fatalf("abort of a branch with 151 descendants on a store of 128 writes per transaction: %v", err)
	}
	if len(res.Aborted) != 152 || res.Aborted[0] != "top" {
		t.Fatalf("aborted %d branches starting with %q, want 152 starting with top", len(res.Aborted), res.Aborted[0])
	}
	check := func(m *branches.Manager, when string) {
		t.Helper()
		for _, name := range []string{"top", "k000", "k149", "grandchild"} {
			if _, _, err := m.View(name); !errors.Is(err, branches.ErrNotFound) {
				t.Errorf("%s: view of %s: %v, want not found", when, name, err)
			}
		}
		if live := m.Live(); len(live) != 1 {
			t.Errorf("%s: %d live branches, want main alone", when, len(live))
		}
	}
	check(m, "after the abort")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	check(m2, "after reopening")
}

// TestFoldAmongManyLayersWithinStoreLimits: with 150 live branches
// forked from one layer of a deep stack, a fold re-points a layer while
// the store holds over 150 layer records (its transaction reads only the
// layers over the folded one), and leaves alone the layer those branches
// share as their base: re-pointing it would rewrite 150 records, more
// than one transaction of 128 writes holds.
func TestFoldAmongManyLayersWithinStoreLimits(t *testing.T) {
	ctx := context.Background()
	st := kvtest.Limited(kvtest.NewStore(t), etcdLimits)
	m := newManagerOpts(t, branches.Options{Store: st})
	for r := range 10 {
		write(t, m, "main", fmt.Sprintf("r%d", r), fmt.Sprintf("round %d", r))
		must(m.Fork(ctx, "main", fmt.Sprintf("c%d", r)))(t)
		must(m.Abort(ctx, fmt.Sprintf("c%d", r)))(t)
	}
	must(m.Reclaim(ctx))(t)
	write(t, m, "main", "shared", "the kids' base")
	for i := range 150 {
		must(m.Fork(ctx, "main", fmt.Sprintf("k%03d", i)))(t)
	}
	n, err := m.Fold(ctx)
	if err != nil {
		t.Fatalf("fold on a store of 128 writes and reads per transaction: %v", err)
	}
	if n == 0 {
		t.Fatal("nothing folded")
	}
	for _, b := range []string{"main", "k000", "k149"} {
		for _, f := range []string{"r0", "r9"} {
			if got, want := read(t, m, b, f), "round "+f[1:]; got != want {
				t.Errorf("after the fold %s's %s = %q, want %q", b, f, got, want)
			}
		}
		if got := read(t, m, b, "shared"); got != "the kids' base" {
			t.Errorf("after the fold %s's shared = %q", b, got)
		}
	}
	write(t, m, "k007", "mine", "k007's")
	if res, err := m.Commit(ctx, "k007"); err != nil || !res.FastPath {
		t.Fatalf("commit of k007 after the fold: %+v, %v", res, err)
	}
	if got := read(t, m, "main", "mine"); got != "k007's" {
		t.Errorf("main's mine = %q", got)
	}
}

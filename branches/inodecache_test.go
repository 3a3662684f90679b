package branches_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// The views cache the frozen layers' inode records (cowfs, View.cache).
// These tests read a record through the cache, change the branch's layers
// by a commit, a checkpoint or a fold, and check that the next read sees
// the new state, not the cached one.

// modeOf returns the permission bits of p in branch b; each call reads
// through the branch's view, filling its inode cache.
func modeOf(t *testing.T, m *branches.Manager, b, p string) os.FileMode {
	t.Helper()
	fs, _, err := m.View(b)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := fs.Billy().Lstat(p)
	if err != nil {
		t.Fatalf("stat %s in %s: %v", p, b, err)
	}
	return fi.Mode().Perm()
}

func chmod(t *testing.T, m *branches.Manager, b, p string, mode os.FileMode) {
	t.Helper()
	fs, _, err := m.View(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Billy().Chmod(p, mode); err != nil {
		t.Fatalf("chmod %s in %s: %v", p, b, err)
	}
}

// TestInodeCacheAfterCommit: a record the parent cached from a frozen layer
// is not served after a child's commit changed it, on the fast path (the
// parent takes the child's stack, whose change is in a frozen layer: the
// child took a checkpoint) and on the merge path (the parent wrote since
// the fork).
func TestInodeCacheAfterCommit(t *testing.T) {
	for _, merge := range []bool{false, true} {
		t.Run(fmt.Sprint("merge=", merge), func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			write(t, m, "main", "f", "x")
			chmod(t, m, "main", "f", 0o644)
			must(m.Fork(ctx, "main", "kid"))(t) // freezes main's top
			if got := modeOf(t, m, "main", "f"); got != 0o644 {
				t.Fatalf("mode before commit %o", got)
			}
			chmod(t, m, "kid", "f", 0o600)
			must(m.Checkpoint(ctx, "kid", "cp"))(t) // freezes kid's change
			if merge {
				write(t, m, "main", "g", "y")
			}
			res := must(m.Commit(ctx, "kid"))(t)
			if res.FastPath == merge {
				t.Fatalf("commit took the fast path: %v, want %v", res.FastPath, !merge)
			}
			if got := modeOf(t, m, "main", "f"); got != 0o600 {
				t.Fatalf("after the commit main's f has mode %o, want 600 (stale inode cache)", got)
			}
		})
	}
}

// TestInodeCacheAfterCheckpoint: a checkpoint freezes the top layer; a
// record cached from below it before must not hide what the top held.
func TestInodeCacheAfterCheckpoint(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "f", "x")
	chmod(t, m, "main", "f", 0o644)
	must(m.Fork(ctx, "main", "kid"))(t) // freezes main's top
	if got := modeOf(t, m, "main", "f"); got != 0o644 {
		t.Fatalf("mode before checkpoint %o", got)
	}
	chmod(t, m, "main", "f", 0o600) // a record in main's new top
	must(m.Checkpoint(ctx, "main", "cp"))(t)
	if got := modeOf(t, m, "main", "f"); got != 0o600 {
		t.Fatalf("after the checkpoint main's f has mode %o, want 600 (stale inode cache)", got)
	}
}

// TestInodeCacheAfterFold: records and layer lists cached before a fold
// must not point at the folded layer once the reclaimer deleted it.
func TestInodeCacheAfterFold(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("r%d", i)
		must(m.Fork(ctx, "main", name))(t)
		write(t, m, name, fmt.Sprintf("d/f%d", i), fmt.Sprint("round ", i))
		must(m.Commit(ctx, name))(t)
		write(t, m, "main", fmt.Sprintf("d/p%d", i), "parent")
	}
	must(m.Fork(ctx, "main", "kid"))(t) // freezes main's top
	must(m.Reclaim(ctx))(t)
	check := func(when string) {
		t.Helper()
		for i := 0; i < 12; i++ {
			if got := read(t, m, "main", fmt.Sprintf("d/f%d", i)); got != fmt.Sprint("round ", i) {
				t.Fatalf("%s: d/f%d = %q", when, i, got)
			}
			if got := read(t, m, "main", fmt.Sprintf("d/p%d", i)); got != "parent" {
				t.Fatalf("%s: d/p%d = %q", when, i, got)
			}
		}
	}
	check("before the fold") // fills main's inode cache
	if n := must(m.Fold(ctx))(t); n == 0 {
		t.Fatal("nothing folded")
	}
	must(m.Reclaim(ctx))(t) // deletes the folded layers
	check("after the fold")
}

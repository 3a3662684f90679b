package branches_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// dirState is what a client caches of a directory: its mtime, ctime and
// listing.
type dirState struct {
	mtime, ctime time.Time
	names        []string
}

func statDir(t *testing.T, m *branches.Manager, b, dir string) dirState {
	t.Helper()
	fs, _, err := m.View(b)
	if err != nil {
		t.Fatal(err)
	}
	a, err := fs.Lookup(cowfs.RootIno, dir)
	if err != nil {
		t.Fatalf("lookup %s in %s: %v", dir, b, err)
	}
	ents, _, err := fs.ReadDir(a.Ino, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	sort.Strings(names)
	return dirState{a.Mtime, a.Ctime, names}
}

func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A merge commit sets the mtime and ctime of every directory whose
// listing it changes to the commit time, also when the parent changed the
// directory after the child did (its mtime is then the larger of both).
func TestMergeSetsDirTimesToCommitTime(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "both/keep", "k")
	write(t, m, "main", "child/keep", "k")
	must(m.Fork(ctx, "main", "c"))(t)
	write(t, m, "c", "both/from-child", "c")
	write(t, m, "c", "child/from-child", "c")
	time.Sleep(2 * time.Millisecond)
	write(t, m, "main", "both/from-parent", "p")
	before := map[string]dirState{"both": statDir(t, m, "main", "both"), "child": statDir(t, m, "main", "child")}
	start := time.Now()
	res := must(m.Commit(ctx, "c"))(t)
	end := time.Now()
	if res.FastPath {
		t.Fatal("parent changed: the commit must merge")
	}
	for dir, old := range before {
		now := statDir(t, m, "main", dir)
		if sameNames(now.names, old.names) {
			t.Fatalf("%s: listing did not change: %v", dir, now.names)
		}
		if now.mtime.Equal(old.mtime) {
			t.Errorf("%s: mtime stayed %v although the merge changed its listing %v -> %v", dir, old.mtime, old.names, now.names)
		}
		for what, ts := range map[string]time.Time{"mtime": now.mtime, "ctime": now.ctime} {
			if ts.Before(start) || ts.After(end) {
				t.Errorf("%s: %s = %v, want the commit time (between %v and %v)", dir, what, ts, start, end)
			}
		}
	}
}

// After a restore, a directory whose listing differs from what it was
// before shows an mtime different from the one a client cached.
func TestRestoreChangesMtimeOfChangedDirs(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "d/keep", "k")
	must(m.Fork(ctx, "main", "c"))(t)
	write(t, m, "c", "d/from-child", "c")
	time.Sleep(2 * time.Millisecond)
	write(t, m, "main", "d/from-parent", "p")
	must(m.Checkpoint(ctx, "main", "cp"))(t)
	atCheckpoint := statDir(t, m, "main", "d")
	must(m.Commit(ctx, "c"))(t)
	cached := statDir(t, m, "main", "d")
	if err := m.Restore(ctx, "main", "cp"); err != nil {
		t.Fatal(err)
	}
	restored := statDir(t, m, "main", "d")
	if !sameNames(restored.names, atCheckpoint.names) || sameNames(restored.names, cached.names) {
		t.Fatalf("listings: checkpoint %v, before restore %v, after %v", atCheckpoint.names, cached.names, restored.names)
	}
	if restored.mtime.Equal(cached.mtime) {
		t.Errorf("mtime %v unchanged by a restore that changed the listing %v -> %v", cached.mtime, cached.names, restored.names)
	}
}

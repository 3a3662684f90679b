package branches_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
)

func newManager(t testing.TB) *branches.Manager {
	t.Helper()
	return newManagerOpts(t, branches.Options{})
}

func newManagerOpts(t testing.TB, opts branches.Options) *branches.Manager {
	t.Helper()
	if opts.ReclaimDelay == 0 {
		opts.ReclaimDelay = -1
	}
	return branchestest.NewManager(t, opts)
}

func write(t testing.TB, m *branches.Manager, b, p, data string) {
	t.Helper()
	fs, _, err := m.View(b)
	if err != nil {
		t.Fatal(err)
	}
	bf := fs.Billy()
	if i := strings.LastIndex(p, "/"); i > 0 {
		if err := bf.MkdirAll(p[:i], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := bf.Create(p)
	if err != nil {
		t.Fatalf("create %s in %s: %v", p, b, err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// read returns the content of p in branch b, or "<err>" describing why not.
func read(t testing.TB, m *branches.Manager, b, p string) string {
	t.Helper()
	fs, _, err := m.View(b)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	f, err := fs.Billy().Open(p)
	if os.IsNotExist(err) {
		return "<missing>"
	}
	if err != nil {
		return "<" + err.Error() + ">"
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(data)
}

func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestForkIsolationAndFastCommit(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "a.txt", "base")
	must(m.Fork(ctx, "main", "b1"))(t)
	must(m.Fork(ctx, "main", "b2"))(t)
	write(t, m, "b1", "new.txt", "from b1")
	write(t, m, "b1", "a.txt", "b1 edit")
	if got := read(t, m, "main", "new.txt"); got != "<missing>" {
		t.Fatalf("parent sees child write: %q", got)
	}
	if got := read(t, m, "b2", "new.txt"); got != "<missing>" {
		t.Fatalf("sibling sees child write: %q", got)
	}
	res := must(m.Commit(ctx, "b1"))(t)
	if !res.FastPath {
		t.Errorf("commit into unchanged parent should be a pointer swap")
	}
	// The fast path does not count the changes: it says so rather than
	// claiming none.
	if j := string(must(json.Marshal(res))(t)); res.MergedPaths != 0 || strings.Contains(j, `"changes"`) || !strings.Contains(j, `"merged_paths":0`) {
		t.Errorf("fast-path commit result %s: want merged_paths 0 and no changes count", j)
	}
	if len(res.Invalidated) != 1 || res.Invalidated[0] != "b2" {
		t.Errorf("invalidated = %v, want [b2]", res.Invalidated)
	}
	if got := read(t, m, "main", "new.txt"); got != "from b1" {
		t.Fatalf("main after commit: %q", got)
	}
	if got := read(t, m, "main", "a.txt"); got != "b1 edit" {
		t.Fatalf("main a.txt after commit: %q", got)
	}
	_, _, err := m.View("b2")
	var ie *branches.InvalidatedError
	if !errors.As(err, &ie) || !strings.Contains(ie.By, "commit of b1 into main") {
		t.Fatalf("sibling view: %v", err)
	}
	if _, err := m.Commit(ctx, "b2"); !errors.Is(err, branches.ErrInvalidated) {
		t.Fatalf("commit of invalidated: %v", err)
	}
	if _, _, err := m.View("b1"); !errors.Is(err, branches.ErrNotFound) {
		t.Fatalf("committed branch view: %v", err)
	}
}

func TestMergeCleanAndConflict(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "shared.txt", "v0")
	write(t, m, "main", "dir/keep.txt", "k")
	must(m.Fork(ctx, "main", "c1"))(t)
	write(t, m, "c1", "dir/child.txt", "child")
	write(t, m, "main", "dir/parent.txt", "parent")
	res := must(m.Commit(ctx, "c1"))(t)
	if res.FastPath {
		t.Fatal("parent changed: commit must merge")
	}
	if res.MergedPaths == 0 || res.Changes != res.MergedPaths {
		t.Errorf("merge: merged_paths %d, changes %d: want the paths merged in both", res.MergedPaths, res.Changes)
	}
	for p, want := range map[string]string{"dir/child.txt": "child", "dir/parent.txt": "parent", "dir/keep.txt": "k"} {
		if got := read(t, m, "main", p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	must(m.Fork(ctx, "main", "c2"))(t)
	write(t, m, "c2", "shared.txt", "child side")
	write(t, m, "c2", ".DS_Store", "noise child")
	write(t, m, "main", "shared.txt", "parent side")
	write(t, m, "main", ".DS_Store", "noise parent")
	_, err := m.Commit(ctx, "c2")
	var ce *branches.ConflictError
	if !errors.As(err, &ce) || len(ce.Paths) != 1 || ce.Paths[0] != "shared.txt" {
		t.Fatalf("conflict: %v", err)
	}
	if got := read(t, m, "main", "shared.txt"); got != "parent side" {
		t.Fatalf("refused commit changed parent: %q", got)
	}
	if got := read(t, m, "c2", "shared.txt"); got != "child side" {
		t.Fatalf("refused commit changed child: %q", got)
	}
}

func TestNestedThreeDeep(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "f", "0")
	must(m.Fork(ctx, "main", "a"))(t)
	must(m.Fork(ctx, "a", "b"))(t)
	must(m.Fork(ctx, "b", "c"))(t)
	write(t, m, "c", "deep/x", "from c")
	if _, err := m.Commit(ctx, "a"); !errors.Is(err, branches.ErrHasChildren) {
		t.Fatalf("commit with live children: %v", err)
	}
	must(m.Commit(ctx, "c"))(t)
	write(t, m, "b", "f", "from b")
	must(m.Commit(ctx, "b"))(t)
	must(m.Commit(ctx, "a"))(t)
	if got := read(t, m, "main", "deep/x"); got != "from c" {
		t.Fatalf("deep/x = %q", got)
	}
	if got := read(t, m, "main", "f"); got != "from b" {
		t.Fatalf("f = %q", got)
	}
}

func TestAbortCheckpointRestore(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	must(m.Fork(ctx, "main", "x"))(t)
	must(m.Fork(ctx, "x", "y"))(t)
	fs, _, _ := m.View("y")
	res := must(m.Abort(ctx, "x"))(t)
	if len(res.Aborted) != 2 {
		t.Fatalf("aborted %v", res.Aborted)
	}
	if _, err := fs.GetAttr(1); err == nil {
		t.Fatal("aborted view still answers")
	}
	if _, err := m.Abort(ctx, "main"); !errors.Is(err, branches.ErrReadOnly) {
		t.Fatalf("abort main: %v", err)
	}
	write(t, m, "main", "f", "one")
	must(m.Checkpoint(ctx, "main", "cp1"))(t)
	write(t, m, "main", "f", "two")
	if _, err := m.Checkpoint(ctx, "main", "cp1"); !errors.Is(err, branches.ErrExists) {
		t.Fatalf("duplicate checkpoint: %v", err)
	}
	must(m.ForkCheckpoint(ctx, "main", "cp1", "fromcp"))(t)
	if got := read(t, m, "fromcp", "f"); got != "one" {
		t.Fatalf("fork from checkpoint: %q", got)
	}
	if err := m.Restore(ctx, "main", "cp1"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, m, "main", "f"); got != "one" {
		t.Fatalf("after restore: %q", got)
	}
	for _, bad := range []string{"", "a/b", "..", strings.Repeat("x", 65), "sp ace"} {
		if _, err := m.Fork(ctx, "main", bad); !errors.Is(err, branches.ErrInvalidName) {
			t.Errorf("fork %q: %v", bad, err)
		}
	}
	if _, err := m.Fork(ctx, "nope", "z"); !errors.Is(err, branches.ErrNotFound) {
		t.Errorf("fork of missing parent: %v", err)
	}
	if _, err := m.Fork(ctx, "main", "fromcp"); !errors.Is(err, branches.ErrExists) {
		t.Errorf("fork over existing: %v", err)
	}
	d := must(m.Diff(ctx, "fromcp"))(t)
	if len(d.Changes) != 0 {
		t.Errorf("diff of untouched fork: %v", d.Changes)
	}
	write(t, m, "fromcp", "g", "12345")
	d = must(m.Diff(ctx, "fromcp"))(t)
	if len(d.Changes) != 1 || d.Changes[0].Path != "g" || d.Changes[0].Kind != branches.Added || d.Changes[0].Bytes != 5 {
		t.Errorf("diff: %+v", d.Changes)
	}
	st := must(m.Reclaim(ctx))(t)
	if st.Layers == 0 {
		t.Errorf("reclaim after abort removed no layer: %+v", st)
	}
}

// TestCommitAfterParentRestore: the parent rolled back to a checkpoint
// taken before the fork; the child's commit still merges, and conflicts
// where the rollback touched the same path.
func TestCommitAfterParentRestore(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "a", "a0")
	must(m.Checkpoint(ctx, "main", "early"))(t)
	write(t, m, "main", "a", "a1")
	write(t, m, "main", "b", "b1")
	must(m.Fork(ctx, "main", "kid"))(t)
	write(t, m, "kid", "c", "kid")
	if err := m.Restore(ctx, "main", "early"); err != nil {
		t.Fatal(err)
	}
	must(m.Commit(ctx, "kid"))(t)
	for p, want := range map[string]string{"a": "a0", "b": "<missing>", "c": "kid"} {
		if got := read(t, m, "main", p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	must(m.Fork(ctx, "main", "kid2"))(t)
	must(m.Checkpoint(ctx, "main", "late"))(t)
	write(t, m, "main", "a", "a2")
	write(t, m, "kid2", "a", "kid2")
	if err := m.Restore(ctx, "main", "late"); err != nil {
		t.Fatal(err)
	}
	write(t, m, "main", "a", "a3")
	if _, err := m.Commit(ctx, "kid2"); !errors.Is(err, branches.ErrConflict) {
		t.Fatalf("commit over a rolled-back edit of the same path: %v", err)
	}
}

// TestReclaimBlocks: blocks written only by an aborted branch are deleted,
// blocks still referenced stay.
func TestReclaimBlocks(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	keep := strings.Repeat("k", 100<<10)
	write(t, m, "main", "keep", keep)
	must(m.Fork(ctx, "main", "tmp"))(t)
	write(t, m, "tmp", "junk", strings.Repeat("j", 300<<10))
	write(t, m, "tmp", "keep2", keep) // dedups onto main's blocks
	must(m.Abort(ctx, "tmp"))(t)
	st := must(m.Reclaim(ctx))(t)
	if st.Blocks == 0 || st.Layers == 0 {
		t.Fatalf("reclaim after abort: %+v", st)
	}
	if got := read(t, m, "main", "keep"); got != keep {
		t.Fatalf("kept file damaged (%d bytes)", len(got))
	}
	st = must(m.Reclaim(ctx))(t)
	if st.Blocks != 0 || st.Layers != 0 {
		t.Fatalf("second pass found more garbage: %+v", st)
	}
}

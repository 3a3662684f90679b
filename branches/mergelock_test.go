package branches_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// TestMergeLeavesParentUsable checks that the parent's view serves reads
// and writes while a merge commit runs, and that what it wrote meanwhile
// is kept, merged with the child's changes or reported as a conflict.
func TestMergeLeavesParentUsable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		during   map[string]string // written to main while the merge runs
		conflict bool
		want     map[string]string // main afterwards
		emptyTop bool              // a sibling's fork leaves main's top empty before the commit
	}{
		{"parent idle", nil, false,
			map[string]string{"a": "child", "x": "main", "e/k": "child"}, false},
		{"parent writes elsewhere", map[string]string{"during": "main2", "e/m": "main2"}, false,
			map[string]string{"a": "child", "x": "main", "e/k": "child", "during": "main2", "e/m": "main2"}, false},
		{"parent silly-renames", map[string]string{".nfs.0000abcd.0001": "open"}, false,
			map[string]string{"a": "child", ".nfs.0000abcd.0001": "open"}, false},
		{"empty top, parent writes elsewhere", map[string]string{"during": "main2"}, false,
			map[string]string{"a": "child", "x": "main", "e/k": "child", "during": "main2"}, true},
		{"empty top, parent writes the same path", map[string]string{"a": "main2"}, true,
			map[string]string{"a": "main2", "x": "main", "e/k": "<missing>"}, true},
		{"parent writes the same path", map[string]string{"a": "main2"}, true,
			map[string]string{"a": "main2", "x": "main", "e/k": "<missing>"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			write(t, m, "main", "e/base", "base")
			must(m.Fork(ctx, "main", "c"))(t)
			write(t, m, "c", "a", "child")
			write(t, m, "c", "e/k", "child")
			write(t, m, "main", "x", "main") // the parent changed: merge path
			if tc.emptyTop {
				must(m.Fork(ctx, "main", "sibling"))(t)
			}
			ran := false
			m.SetMergeHook(func() {
				ran = true
				// With the parent locked, these would deadlock.
				if got := read(t, m, "main", "x"); got != "main" {
					t.Errorf("main/x during the merge = %q, want main", got)
				}
				for p, v := range tc.during {
					write(t, m, "main", p, v)
				}
			})
			res, err := m.Commit(ctx, "c")
			if !ran {
				t.Fatal("the merge hook did not run: the commit took the fast path")
			}
			var ce *branches.ConflictError
			switch {
			case tc.conflict && !errors.As(err, &ce):
				t.Fatalf("commit: %v, want a conflict", err)
			case !tc.conflict && err != nil:
				t.Fatalf("commit: %v", err)
			case !tc.conflict && res.FastPath:
				t.Fatal("commit took the fast path")
			}
			for p, v := range tc.want {
				if got := read(t, m, "main", p); got != v {
					t.Errorf("main/%s = %q, want %q", p, got, v)
				}
			}
			if tc.conflict {
				// The child is still there, and main still writable.
				if got := read(t, m, "c", "a"); got != "child" {
					t.Errorf("c/a after the conflict = %q, want child", got)
				}
				write(t, m, "main", "after", "ok")
				must(m.Abort(ctx, "c"))(t)
			}
			// Everything reopens the same.
			if _, err := m.Reclaim(ctx); err != nil {
				t.Fatal(err)
			}
			for p, v := range tc.want {
				if got := read(t, m, "main", p); got != v {
					t.Errorf("after reclaim: main/%s = %q, want %q", p, got, v)
				}
			}
		})
	}
}

// TestMergeWithConcurrentParentWrites commits a child with many files
// while another goroutine keeps creating files in the parent: the commit
// succeeds and the parent ends with both sides' files.
func TestMergeWithConcurrentParentWrites(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "e/base", "base")
	must(m.Fork(ctx, "main", "c"))(t)
	const files = 300
	for i := 0; i < files; i++ {
		write(t, m, "c", fmt.Sprintf("e/k%d", i), "child")
	}
	write(t, m, "main", "x", "main")
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			write(t, m, "main", fmt.Sprintf("e/p%d", n), fmt.Sprint(n))
			n++
			if got := read(t, m, "main", "x"); got != "main" {
				t.Errorf("main/x = %q while committing", got)
				return
			}
		}
	}()
	res, err := m.Commit(ctx, "c")
	close(stop)
	n := <-done
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if res.FastPath {
		t.Fatal("commit took the fast path")
	}
	t.Logf("the parent wrote %d files around the commit", n)
	for i := 0; i < files; i++ {
		if got := read(t, m, "main", fmt.Sprintf("e/k%d", i)); got != "child" {
			t.Fatalf("main/e/k%d = %q, want child", i, got)
		}
	}
	for j := 0; j < n; j++ {
		if got := read(t, m, "main", fmt.Sprintf("e/p%d", j)); got != fmt.Sprint(j) {
			t.Fatalf("main/e/p%d = %q, want %d", j, got, j)
		}
	}
}

// TestFailedMergeKeepsParentStack checks that a merge commit that fails on
// a conflict leaves the parent as it was when its top was empty, so a
// sibling forked from that top still commits on the fast path.
func TestFailedMergeKeepsParentStack(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "x", "base")
	must(m.Fork(ctx, "main", "c"))(t)
	write(t, m, "main", "y", "main")
	write(t, m, "c", "y", "child") // conflicts with main's y
	must(m.Fork(ctx, "main", "d"))(t)
	write(t, m, "d", "z", "d")
	fs, _, err := m.View("main")
	if err != nil {
		t.Fatal(err)
	}
	before := fs.Stack()
	var ce *branches.ConflictError
	if _, err := m.Commit(ctx, "c"); !errors.As(err, &ce) {
		t.Fatalf("commit c: %v, want a conflict", err)
	}
	if after := fs.Stack(); !slices.Equal(before, after) {
		t.Fatalf("main's stack changed from %v to %v by a failed commit", before, after)
	}
	res := must(m.Commit(ctx, "d"))(t)
	if !res.FastPath {
		t.Error("commit d took the merge path after c's failed commit")
	}
	if got := read(t, m, "main", "z"); got != "d" {
		t.Errorf("main/z = %q, want d", got)
	}
}

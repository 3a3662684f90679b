// Regression tests for bugs the model, crash, race and go-billy suite tests
// found; each comment names the cause that was fixed.

package branches_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
)

// Bug 1 (cowfs/merge.go, Merge): both sides rename the same directory to
// different names. The entry changes do not collide (different names), the
// directory inode merges (only its Links differ), so the merge succeeds and
// the parent ends with the directory under two names: /x and /y are the
// same directory inode, a hard-linked directory. Expected: a conflict (the
// path of d was changed on both sides).
func TestRegressionDirMovedOnBothSides(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "d/f", "x")
	must(m.Fork(ctx, "main", "c"))(t)
	mfs, _, _ := m.View("main")
	if err := mfs.Billy().Rename("d", "x"); err != nil {
		t.Fatal(err)
	}
	cfs, _, _ := m.View("c")
	if err := cfs.Billy().Rename("d", "y"); err != nil {
		t.Fatal(err)
	}
	_, err := m.Commit(ctx, "c")
	if errors.Is(err, branches.ErrConflict) {
		return
	}
	_, errx := mfs.Billy().Lstat("x")
	_, erry := mfs.Billy().Lstat("y")
	if errx == nil && erry == nil {
		t.Fatalf("commit succeeded (%v) and the directory is now both /x and /y", err)
	}
}

// Bug 2 (cowfs/merge.go, Merge): the parent moves a into b, the child
// moves b into a. No key collides, the merge succeeds, and both a and b
// vanish from the root: they now only contain each other (an unreachable
// cycle; fa and fb are lost). Expected: a conflict, or any merge that keeps
// every directory reachable.
func TestRegressionMergeMakesACycle(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "a/fa", "A")
	write(t, m, "main", "b/fb", "B")
	must(m.Fork(ctx, "main", "c"))(t)
	mfs, _, _ := m.View("main")
	if err := mfs.Billy().Rename("a", "b/a"); err != nil {
		t.Fatal(err)
	}
	cfs, _, _ := m.View("c")
	if err := cfs.Billy().Rename("b", "a/b"); err != nil {
		t.Fatal(err)
	}
	_, err := m.Commit(ctx, "c")
	if errors.Is(err, branches.ErrConflict) {
		return
	}
	_, erra := mfs.Billy().Stat("a")
	_, errb := mfs.Billy().Stat("b")
	if os.IsNotExist(erra) && os.IsNotExist(errb) {
		t.Fatalf("commit succeeded (%v) and both /a and /b are unreachable (cycle)", err)
	}
}

// Bug 3 (branches/manager.go, fullInfo, used by List and Get): it copies
// rec.Top under m.mu and then calls cowfs.LoadStack without any lock; an
// abort (or commit) plus the background reclaimer deletes that layer in
// between, and List fails with "cowfs: layer N: kv: not found". Fix: skip
// branches that are no longer live when their layers are gone, or take the
// stack from the view (b.fs.Stack()) and have the reclaimer not delete
// layers a concurrent reader holds (e.g. hold opMu's read side in List, or
// retry when the branch state changed meanwhile).
func TestRegressionListDuringAbort(t *testing.T) {
	ctx := context.Background()
	m := newManagerOpts(t, branches.Options{ReclaimDelay: time.Millisecond})
	write(t, m, "main", "f", "x")
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 300; i++ {
			n := fmt.Sprintf("x%d", i)
			if _, err := m.Fork(ctx, "main", n); err != nil {
				done <- err
				return
			}
			if _, err := m.Abort(ctx, n); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		if _, err := m.List(ctx); err != nil {
			<-done
			t.Fatalf("list during fork/abort: %v", err)
		}
	}
}

// Bug 4 (cowfs/billy.go, Billy.Stat, Billy.Lstat, Billy.ReadDir): the
// FileInfo's Name() is the inode's first link name (Attr.Name), not the name
// looked up. ReadDir of a directory holding a hard link lists the link
// under its inode's first name (here "a" twice, no "b"); Stat("link")
// through a symlink answers the target's name. Fix: FileInfo carries the
// name it was reached by: path.Base of the cleaned path in Stat/Lstat, the
// DirEntry's Name in ReadDir.
func TestRegressionReadDirHardLinkName(t *testing.T) {
	m := newManager(t)
	write(t, m, "main", "a", "x")
	fs, _, _ := m.View("main")
	b := fs.Billy()
	if err := b.Link("a", "b"); err != nil {
		t.Fatal(err)
	}
	ents, err := b.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if fmt.Sprint(names) != "[a b]" {
		t.Errorf("readdir lists %v, want [a b]", names)
	}
	if err := b.Symlink("a", "l"); err != nil {
		t.Fatal(err)
	}
	if fi, err := b.Stat("l"); err != nil || fi.Name() != "l" {
		t.Errorf("Stat(l).Name() = %q, %v; want l", fi.Name(), err)
	}
}

// Bug 5 (cowfs/billy.go, Billy.OpenFile): O_CREATE|O_EXCL on an existing
// symlink follows it: a self-referencing link gives ELOOP, a link to an
// existing file gives EEXIST only by luck, and a dangling one creates
// nothing but answers EEXIST from the guarded create. POSIX: with O_CREAT
// and O_EXCL, a symlink in the last component is not followed and open
// fails with EEXIST. Fix: resolve the last component with follow=false when
// flag has O_CREATE|O_EXCL.
func TestRegressionCreateExclOnSymlinkLoop(t *testing.T) {
	m := newManager(t)
	fs, _, _ := m.View("main")
	b := fs.Billy()
	if err := b.Symlink("self", "self"); err != nil {
		t.Fatal(err)
	}
	_, err := b.OpenFile("self", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if !errors.Is(err, syscall.EEXIST) {
		t.Errorf("O_CREATE|O_EXCL on an existing symlink: %v, want EEXIST", err)
	}
}

// Bug 6 (cowfs/billy.go, Billy.OpenFile): File.Name() keeps a leading "/"
// ("/bar/foo"); go-billy's suite expects the cleaned relative name
// ("bar/foo").
func TestRegressionFileNameLeadingSlash(t *testing.T) {
	m := newManager(t)
	fs, _, _ := m.View("main")
	f, err := fs.Billy().Create("/foo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Name() != "foo" {
		t.Errorf("File.Name() = %q, want foo", f.Name())
	}
}

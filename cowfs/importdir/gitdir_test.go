package importdir

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

// git runs the real git CLI in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+os.Getenv("HOME"),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// materialize writes the view's tree into dir (files, directories,
// symlinks, modes, mtimes), as an export would.
func materialize(t *testing.T, f *cowfs.View, ino cowfs.InodeID, dir string) {
	t.Helper()
	var cookie uint64
	for {
		ents, eof, err := f.ReadDir(ino, cookie, 256)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			cookie = e.Cookie
			p := filepath.Join(dir, e.Name)
			a, err := f.GetAttr(e.Ino)
			if err != nil {
				t.Fatal(err)
			}
			switch a.Type {
			case cowfs.TypeDir:
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
				materialize(t, f, e.Ino, p)
				os.Chmod(p, os.FileMode(a.Mode&0o777))
			case cowfs.TypeRegular:
				buf := make([]byte, a.Size)
				if a.Size > 0 {
					if _, _, err := f.ReadAt(e.Ino, buf, 0); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(p, buf, os.FileMode(a.Mode&0o777)|0o200); err != nil {
					t.Fatal(err)
				}
				os.Chmod(p, os.FileMode(a.Mode&0o777))
			case cowfs.TypeSymlink:
				target, err := f.Readlink(e.Ino)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
				continue
			default:
				continue
			}
			os.Chtimes(p, a.Mtime, a.Mtime)
		}
		if eof || len(ents) == 0 {
			return
		}
	}
}

func haveGit() bool { _, err := exec.LookPath("git"); return err == nil }

// TestImportLinkedWorktree: a linked worktree (git worktree add) and a
// submodule's checkout, whose .git files name git directories outside the
// imported folder, come in with a self-contained .git: git status is
// clean in a copy of the branch, git sees .git as its git directory, and
// a commit there leaves the host repository alone. A .git file deeper in
// the folder that points outside is refused with the fix. Real git, run
// as a user who is not root.
func TestImportLinkedWorktree(t *testing.T) {
	testbin.Prerequisite(t, haveGit(), "git is not installed", "apt-get install git")
	testbin.Unprivileged(t, "TestImportLinkedWorktree", func(t *testing.T) {
		t.Setenv("HOME", t.TempDir())
		ctx := context.Background()
		base := t.TempDir()
		repo := filepath.Join(base, "repo")
		os.MkdirAll(filepath.Join(repo, "src"), 0o755)
		os.WriteFile(filepath.Join(repo, "src", "a.go"), []byte("package a\n"), 0o644)
		os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("node_modules/\n.env\n"), 0o644)
		git(t, repo, "init", "-q", "-b", "main")
		git(t, repo, "add", ".")
		git(t, repo, "commit", "-q", "-m", "first")
		wt := filepath.Join(base, "wt")
		git(t, repo, "worktree", "add", "-q", "-b", "feature", wt)
		os.WriteFile(filepath.Join(wt, "src", "b.go"), []byte("package a // b\n"), 0o644)
		git(t, wt, "add", ".")
		git(t, wt, "commit", "-q", "-m", "on feature")
		// Ignored state, as a real checkout has.
		os.MkdirAll(filepath.Join(wt, "node_modules", "dep"), 0o755)
		os.WriteFile(filepath.Join(wt, "node_modules", "dep", "index.js"), []byte("1"), 0o644)
		os.WriteFile(filepath.Join(wt, ".env"), []byte("X=1"), 0o600)
		hostRefs := git(t, repo, "for-each-ref")

		check := func(t *testing.T, src, branch string) {
			t.Helper()
			_, f := newStoreFS(t)
			if _, err := Import(ctx, f, cowfs.RootIno, src, Options{Cache: NewCache()}); err != nil {
				t.Fatal(err)
			}
			a, err := f.Lookup(cowfs.RootIno, ".git")
			if err != nil || a.Type != cowfs.TypeDir {
				t.Fatalf(".git in the branch: %+v, %v (want a directory)", a, err)
			}
			cp := filepath.Join(t.TempDir(), "copy")
			os.Mkdir(cp, 0o755)
			materialize(t, f, cowfs.RootIno, cp)
			if got := strings.TrimSpace(git(t, cp, "rev-parse", "--absolute-git-dir")); got != filepath.Join(cp, ".git") {
				t.Fatalf("git dir of the copy: %s", got)
			}
			if got := strings.TrimSpace(git(t, cp, "rev-parse", "--show-toplevel")); got != cp {
				t.Fatalf("top level of the copy: %s", got)
			}
			if st := git(t, cp, "status", "--porcelain"); st != "" {
				t.Fatalf("git status in the copy is not clean:\n%s", st)
			}
			if b := strings.TrimSpace(git(t, cp, "branch", "--show-current")); b != branch {
				t.Fatalf("branch %q, want %q", b, branch)
			}
			if err := os.WriteFile(filepath.Join(cp, "c.go"), []byte("package a // c\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			git(t, cp, "add", ".")
			git(t, cp, "commit", "-q", "-m", "in the branch")
			git(t, cp, "gc", "-q")
			if got := git(t, repo, "for-each-ref"); got != hostRefs {
				t.Fatalf("the host repository's refs changed:\n%s\nwas\n%s", got, hostRefs)
			}
		}
		t.Run("worktree", func(t *testing.T) { check(t, wt, "feature") })
		// An update brings the worktree's files and leaves the branch's
		// own .git alone, even after the host's git moved on.
		t.Run("worktree-update", func(t *testing.T) {
			NoRacyWindow(t)
			store, f := newStoreFS(t)
			cache := NewCache()
			if _, err := Import(ctx, f, cowfs.RootIno, wt, Options{Cache: cache}); err != nil {
				t.Fatal(err)
			}
			if err := cache.Save(ctx, store); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(wt, "src", "a.go"), []byte("package a // edited\n"), 0o644)
			git(t, wt, "commit", "-q", "-am", "host commit")
			loaded, err := LoadCache(ctx, store)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Update(ctx, f, cowfs.RootIno, wt, loaded, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Paths) != 1 || c.Paths[0] != (PathChange{Path: "src/a.go", Kind: Modified}) {
				t.Fatalf("update after a host commit: %+v", c.Paths)
			}
			a, err := f.Lookup(cowfs.RootIno, ".git")
			if err != nil || a.Type != cowfs.TypeDir {
				t.Fatalf(".git after the update: %+v, %v", a, err)
			}
		})
		hostRefs = git(t, repo, "for-each-ref")

		sub := filepath.Join(base, "sub")
		os.MkdirAll(sub, 0o755)
		os.WriteFile(filepath.Join(sub, "s.txt"), []byte("s"), 0o644)
		git(t, sub, "init", "-q", "-b", "main")
		git(t, sub, "add", ".")
		git(t, sub, "commit", "-q", "-m", "sub")
		git(t, repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "lib/sub")
		git(t, repo, "commit", "-q", "-m", "submodule")
		hostRefs = git(t, repo, "for-each-ref")
		t.Run("submodule", func(t *testing.T) {
			git(t, filepath.Join(repo, "lib/sub"), "checkout", "-q", "-b", "work")
			check(t, filepath.Join(repo, "lib", "sub"), "work")
		})

		// The superproject's folder holds its submodule's git directory:
		// imported as it is. A folder holding a worktree whose git
		// directory is elsewhere: refused with the fix.
		t.Run("nested-inside", func(t *testing.T) {
			_, f := newStoreFS(t)
			if _, err := Import(ctx, f, cowfs.RootIno, repo, Options{}); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("nested-outside", func(t *testing.T) {
			holder := filepath.Join(base, "holder")
			os.Mkdir(holder, 0o755)
			git(t, repo, "worktree", "add", "-q", "-b", "other", filepath.Join(holder, "wt2"))
			_, f := newStoreFS(t)
			_, err := Import(ctx, f, cowfs.RootIno, holder, Options{})
			if !errors.Is(err, ErrGitOutside) || !strings.Contains(err.Error(), "wt2/.git") || !strings.Contains(err.Error(), "git clone") {
				t.Fatalf("import of a folder holding a linked worktree: %v", err)
			}
		})
	})
}

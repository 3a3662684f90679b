package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/go-git/go-billy/v5"
)

func needGit(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("git")
	testbin.Prerequisite(t, err == nil, "git is not installed", "apt-get install git")
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// treeDigest describes every path under root: type, mode, content hash
// or symlink target, and (with mtimes) the mtime of files.
func treeDigest(t *testing.T, root string, mtimes bool, skip ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, s := range skip {
			if rel == s || strings.HasPrefix(rel, s+"/") {
				if fi.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if rel == "." {
			return nil
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[rel] = "symlink " + target
		case fi.IsDir():
			m[rel] = fmt.Sprintf("dir %v", fi.Mode())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = fmt.Sprintf("file %v %x", fi.Mode(), sha256.Sum256(b))
			if mtimes {
				m[rel] += " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func diffDigests(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if got[k] != v {
			out = append(out, fmt.Sprintf("%s: want %q, got %q", k, v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: unexpected %q", k, v))
		}
	}
	return strings.Join(out, "\n")
}

// outputFixture makes a git repository, imports it as main, forks b and
// changes b in every way an output form carries. It returns the store
// flags and the source folder.
func outputFixture(t *testing.T) (s []string, src string) {
	t.Helper()
	needGit(t)
	store := filepath.Join(shortTempDir(t), "s")
	s = []string{"--store", store}
	src = t.TempDir()
	os.WriteFile(filepath.Join(src, "text.txt"), []byte("one\ntwo\nthree\n"), 0o644)
	os.WriteFile(filepath.Join(src, "gone.txt"), []byte("bye\n"), 0o644)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(src, "bin.dat"), []byte("bin\x00ary\x01\x02"), 0o644)
	os.MkdirAll(filepath.Join(src, "olddir", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "olddir", "sub", "f"), []byte("f\n"), 0o644)
	os.Symlink("text.txt", filepath.Join(src, "link"))
	gitIn(t, src, "init", "-q", "-b", "main")
	gitIn(t, src, "add", "-A")
	gitIn(t, src, "commit", "-q", "-m", "base")
	if code, _, _ := runCLI(t, append([]string{"init", "--from", src}, s...)...); code != 0 {
		t.Fatal("init --from failed")
	}
	if code, _, _ := runCLI(t, append([]string{"fork", "main", "b"}, s...)...); code != 0 {
		t.Fatal("fork failed")
	}
	inBranch(t, store, "b", func(fs billy.Filesystem) {
		writeFile(t, fs, "text.txt", "one\n2\nthree\n", 0o644)
		writeFile(t, fs, "new.txt", "new\n", 0o644)
		writeFile(t, fs, "bin.dat", "bin\x00ARY", 0o644)
		if err := fs.Remove("gone.txt"); err != nil {
			t.Fatal(err)
		}
		if err := fs.(billy.Change).Chmod("run.sh", 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"olddir/sub/f", "olddir/sub", "olddir"} {
			if err := fs.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		fs.MkdirAll("newdir/deep", 0o755)
		writeFile(t, fs, "newdir/deep/x", "x\n", 0o600)
		fs.MkdirAll("emptydir", 0o700)
		if err := fs.Remove("link"); err != nil {
			t.Fatal(err)
		}
		if err := fs.Symlink("new.txt", "link"); err != nil {
			t.Fatal(err)
		}
	})
	return s, src
}

// TestPatchAndExport: diff --patch applies with git apply to the source
// folder and gives the branch's tree, as export writes it; --tar gives
// the same tree, read back with archive/tar and with tar.
func TestPatchAndExport(t *testing.T) {
	s, src := outputFixture(t)
	code, patch, _ := runCLI(t, append([]string{"diff", "b", "--patch"}, s...)...)
	if code != 0 || !strings.Contains(patch, "GIT binary patch") || !strings.Contains(patch, "new mode 100755") ||
		strings.Contains(patch, ".git/") {
		t.Fatalf("diff --patch: %d\n%s", code, patch)
	}
	exported := filepath.Join(t.TempDir(), "out")
	code, out, _ := runCLI(t, append([]string{"export", "b", exported, "--json"}, s...)...)
	var er exportResult
	if code != 0 || json.Unmarshal([]byte(out), &er) != nil || er.Files == 0 || er.Dirs == 0 {
		t.Fatalf("export: %d %q", code, out)
	}
	// The export is the branch: the imported tree plus the changes.
	if _, err := os.Stat(filepath.Join(exported, "emptydir")); err != nil {
		t.Fatalf("empty directory not exported: %v", err)
	}
	cmd := exec.Command("git", "apply", "--check", "-")
	cmd.Dir, cmd.Stdin = src, strings.NewReader(patch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply --check: %v\n%s", err, b)
	}
	cmd = exec.Command("git", "apply", "-")
	cmd.Dir, cmd.Stdin = src, strings.NewReader(patch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s", err, b)
	}
	// git apply cannot create empty directories nor keep modes other
	// than 644 and 755: compare what a patch carries.
	os.Remove(filepath.Join(exported, "emptydir"))
	os.Chmod(filepath.Join(exported, "newdir", "deep", "x"), 0o644)
	if d := diffDigests(treeDigest(t, exported, false, ".git"), treeDigest(t, src, false, ".git")); d != "" {
		t.Fatalf("patched source differs from the export:\n%s", d)
	}
	// A non-empty folder is refused.
	if code, _, stderr := runCLI(t, append([]string{"export", "b", exported}, s...)...); code != exitUsage || !strings.Contains(stderr, "not empty") {
		t.Fatalf("export into a non-empty folder: %d %q", code, stderr)
	}

	// --tar: read back with archive/tar, then with tar.
	tarFile := filepath.Join(t.TempDir(), "b.tar")
	if code, _, _ := runCLI(t, append([]string{"export", "b", "--tar", tarFile}, s...)...); code != 0 {
		t.Fatal("export --tar failed")
	}
	f, err := os.Open(tarFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]*tar.Header{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = h
	}
	if h := names["link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "new.txt" {
		t.Fatalf("symlink in tar: %+v", h)
	}
	if h := names["run.sh"]; h == nil || h.Mode != 0o755 {
		t.Fatalf("mode in tar: %+v", h)
	}
	if h := names["emptydir/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Fatalf("empty dir in tar: %+v", names)
	}
	_, err = exec.LookPath("tar")
	testbin.Prerequisite(t, err == nil, "tar is not installed", "apt-get install tar")
	untarred := t.TempDir()
	if b, err := exec.Command("tar", "-xpf", tarFile, "-C", untarred).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, b)
	}
	exported2 := filepath.Join(t.TempDir(), "out2")
	runCLI(t, append([]string{"export", "b", exported2}, s...)...)
	if d := diffDigests(treeDigest(t, exported2, true), treeDigest(t, untarred, true)); d != "" {
		t.Fatalf("tar differs from the export:\n%s", d)
	}
}

// TestDiffSummarisesGit: what changed under .git is one line (and a git
// object in JSON), not a line per object file.
func TestDiffSummarisesGit(t *testing.T) {
	s, src := outputFixture(t)
	before := strings.TrimSpace(gitIn(t, src, "rev-parse", "HEAD"))
	// A commit made in a copy of the repository, whose .git then goes
	// into the branch as an agent's commit would.
	work := t.TempDir()
	if b, err := exec.Command("cp", "-a", src+"/.", work).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, b)
	}
	os.WriteFile(filepath.Join(work, "text.txt"), []byte("committed\n"), 0o644)
	gitIn(t, work, "commit", "-q", "-am", "agent")
	after := strings.TrimSpace(gitIn(t, work, "rev-parse", "HEAD"))
	store := s[1]
	inBranch(t, store, "b", func(fs billy.Filesystem) {
		filepath.Walk(filepath.Join(work, ".git"), func(p string, fi os.FileInfo, err error) error {
			rel, _ := filepath.Rel(work, p)
			switch {
			case fi.IsDir():
				fs.MkdirAll(rel, 0o755)
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				writeFile(t, fs, rel, string(b), fi.Mode())
			}
			return nil
		})
	})
	code, out, _ := runCLI(t, append([]string{"diff", "b"}, s...)...)
	if code != 0 || strings.Contains(out, ".git/objects") {
		t.Fatalf("diff: %d %q", code, out)
	}
	want := fmt.Sprintf(".git: HEAD %s (main) -> %s (main), 1 ref changed, 3 objects added", before[:7], after[:7])
	if !strings.Contains(out, want) {
		t.Fatalf("diff lacks %q:\n%s", want, out)
	}
	code, out, _ = runCLI(t, append([]string{"diff", "b", "--json"}, s...)...)
	var d branches.Diff
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Git == nil {
		t.Fatalf("diff --json: %d %q", code, out)
	}
	if d.Git.HeadBefore != before || d.Git.HeadAfter != after || d.Git.ObjectsAdded != 3 || len(d.Git.RefsChanged) != 1 {
		t.Fatalf("git summary: %+v", d.Git)
	}
	for _, c := range d.Changes {
		if strings.HasPrefix(c.Path, ".git") {
			t.Fatalf("JSON lists %s", c.Path)
		}
	}
}

package results_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches/results"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

// buildTrees makes a base tree and a head tree that differ by every kind
// of change a patch carries, and returns their directories.
func buildTrees(t *testing.T) (base, head string) {
	t.Helper()
	root := t.TempDir()
	base, head = filepath.Join(root, "base"), filepath.Join(root, "head")
	bin := make([]byte, 3000)
	rand.Read(bin)
	bin[10] = 0
	bin2 := append(append([]byte{}, bin[:1500]...), []byte("changed\x00")...)
	var long strings.Builder
	for i := range 200 {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	longNew := strings.Replace(long.String(), "line 50\n", "line fifty\n", 1)
	longNew = strings.Replace(longNew, "line 150\n", "", 1) + "tail without newline"
	for _, tr := range []struct {
		dir   string
		files map[string]string
		modes map[string]os.FileMode
		links map[string]string
		dirs  []string
	}{
		{base, map[string]string{
			"text.txt": "one\ntwo\nthree\n", "long.txt": long.String(), "gone.txt": "bye\n",
			"bin.dat": string(bin), "binmod.dat": string(bin), "exec.sh": "#!/bin/sh\necho hi\n",
			"olddir/a": "a\n", "olddir/sub/b": "b\n", "type": "was a file\n", "empty": "",
			".git/HEAD": "ref: refs/heads/main\n", "q\"uote d": "x\n",
		}, map[string]os.FileMode{"exec.sh": 0o644}, map[string]string{"link": "text.txt", "linkmod": "a"}, nil},
		{head, map[string]string{
			"text.txt": "one\n2\nthree\n", "long.txt": longNew, "added.txt": "new\n",
			"binmod.dat": string(bin2), "newbin.dat": string(bin), "exec.sh": "#!/bin/sh\necho hi\n",
			"newdir/deep/x": "x\n", "newdir/y": "", "empty": "now full\n", "noeol": "no newline",
			".git/HEAD": "ref: refs/heads/other\n", "q\"uote d": "y\n", "tab\tname": "t\n",
		}, map[string]os.FileMode{"exec.sh": 0o755}, map[string]string{"link": "text.txt", "linkmod": "b", "type": "bin.dat", "newlink": "newdir/y"}, nil},
	} {
		for name, data := range tr.files {
			p := filepath.Join(tr.dir, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			mode := os.FileMode(0o644)
			if m, ok := tr.modes[name]; ok {
				mode = m
			}
			if err := os.WriteFile(p, []byte(data), mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, mode)
		}
		for name, target := range tr.links {
			if err := os.Symlink(target, filepath.Join(tr.dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Unchanged files keep their mtimes, as in a branch.
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeSymlink == 0 {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	return base, head
}

// allPaths lists the top-level names of both trees, as the roots a diff
// would give (Expand walks the directories).
func allPaths(t *testing.T, dirs ...string) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

func needGit(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("git")
	testbin.Prerequisite(t, err == nil, "git is not installed", "apt-get install git")
}

func git(t *testing.T, dir string, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPatchAppliesWithGit: git apply --check accepts the patch against the
// base tree, and git apply turns a copy of the base into the head, byte
// for byte, modes and symlinks included; .git is left out.
func TestPatchAppliesWithGit(t *testing.T) {
	needGit(t)
	base, head := buildTrees(t)
	deltas, err := results.Expand(results.Dir(base), results.Dir(head), allPaths(t, base, head), results.ExpandOptions{Hash: true})
	if err != nil {
		t.Fatal(err)
	}
	var patch bytes.Buffer
	st, err := results.WritePatch(&patch, results.Dir(base), results.Dir(head), deltas, results.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v\n%s", st, patch.String())
	if st.Binary < 2 || strings.Contains(patch.String(), ".git/HEAD") {
		t.Fatalf("patch stats %+v", st)
	}
	git(t, base, patch.Bytes(), "apply", "--check", "-")
	git(t, base, patch.Bytes(), "apply", "-")
	os.RemoveAll(filepath.Join(base, ".git"))
	os.RemoveAll(filepath.Join(head, ".git"))
	// git apply removes the directories it emptied; it never creates
	// empty ones, and a patch cannot carry them.
	if diff := compareTrees(t, head, base, false); diff != "" {
		t.Fatal(diff)
	}
}

// compareTrees returns "" when every file, symlink and directory of want
// is in got with the same content, executable bit (or, with modes, the
// whole mode) and target, and got has nothing else.
func compareTrees(t *testing.T, want, got string, modes bool) string {
	t.Helper()
	list := func(root string) map[string]string {
		m := map[string]string{}
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, p)
			if rel == "." {
				return nil
			}
			mode := fi.Mode()
			if !modes {
				mode &= os.ModeType | 0o100
			}
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				m[rel] = "link " + target
			case fi.IsDir():
				m[rel] = fmt.Sprintf("dir %v", mode)
			default:
				b, _ := os.ReadFile(p)
				m[rel] = fmt.Sprintf("file %v %q", mode, b)
			}
			return nil
		})
		return m
	}
	w, g := list(want), list(got)
	var out []string
	for k, v := range w {
		if g[k] != v {
			out = append(out, fmt.Sprintf("%s: want %.80s, got %.80s", k, v, g[k]))
		}
	}
	for k, v := range g {
		if _, ok := w[k]; !ok {
			out = append(out, fmt.Sprintf("%s: unexpected %.80s", k, v))
		}
	}
	return strings.Join(out, "\n")
}

// TestPatchTypeChanges: a directory that becomes a file, and a file that
// becomes a directory, apply with git apply.
func TestPatchTypeChanges(t *testing.T) {
	needGit(t)
	root := t.TempDir()
	base, head := filepath.Join(root, "base"), filepath.Join(root, "head")
	os.MkdirAll(filepath.Join(base, "d2f", "in"), 0o755)
	os.WriteFile(filepath.Join(base, "d2f", "in", "x"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(base, "f2d"), []byte("file\n"), 0o644)
	os.MkdirAll(filepath.Join(head, "f2d"), 0o755)
	os.WriteFile(filepath.Join(head, "f2d", "y"), []byte("y\n"), 0o644)
	os.WriteFile(filepath.Join(head, "d2f"), []byte("now a file\n"), 0o644)
	deltas, err := results.Expand(results.Dir(base), results.Dir(head), allPaths(t, base, head), results.ExpandOptions{Hash: true})
	if err != nil {
		t.Fatal(err)
	}
	var patch bytes.Buffer
	if _, err := results.WritePatch(&patch, results.Dir(base), results.Dir(head), deltas, results.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	git(t, base, patch.Bytes(), "apply", "--check", "-")
	git(t, base, patch.Bytes(), "apply", "-")
	if d := compareTrees(t, head, base, false); d != "" {
		t.Fatalf("%s\n%s", d, patch.String())
	}
}

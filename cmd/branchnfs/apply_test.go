package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// copyTree copies src to a new folder with cp -a.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if b, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, b)
	}
	return dst
}

// TestApply: apply writes the branch's changes into a copy of the
// imported folder, which then equals the branch's export byte for byte,
// mtimes of files and modes included; a second apply finds everything
// there; a conflict leaves the folder untouched and exits 16.
func TestApply(t *testing.T) {
	s, src := outputFixture(t)
	exported := filepath.Join(t.TempDir(), "out")
	if code, _, _ := runCLI(t, append([]string{"export", "b", exported}, s...)...); code != 0 {
		t.Fatal("export failed")
	}
	want := treeDigest(t, exported, true, ".git")

	// A conflict: the folder changed text.txt, which the branch changed.
	conflicted := copyTree(t, src)
	os.WriteFile(filepath.Join(conflicted, "text.txt"), []byte("mine\n"), 0o644)
	os.WriteFile(filepath.Join(conflicted, "olddir", "sub", "untracked"), []byte("keep me\n"), 0o644)
	before := treeDigest(t, conflicted, true)
	code, out, stderr := runCLI(t, append([]string{"apply", "b", "--to", conflicted}, s...)...)
	if code != exitApplyConflict || !strings.Contains(out, "C  text.txt: changed in the folder since the fork") ||
		!strings.Contains(out, "C  olddir/sub/untracked: only in the folder") || !strings.Contains(stderr, "nothing was written") {
		t.Fatalf("apply with conflicts: %d %q %q", code, out, stderr)
	}
	if d := diffDigests(before, treeDigest(t, conflicted, true)); d != "" {
		t.Fatalf("a refused apply changed the folder:\n%s", d)
	}

	dir := copyTree(t, src)
	before = treeDigest(t, dir, true)
	code, out, _ = runCLI(t, append([]string{"apply", "b", "--to", dir, "--dry-run", "--json"}, s...)...)
	var res applyResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Changes) == 0 || len(res.Conflicts) != 0 {
		t.Fatalf("apply --dry-run: %d %q", code, out)
	}
	if d := diffDigests(before, treeDigest(t, dir, true)); d != "" {
		t.Fatalf("a dry run changed the folder:\n%s", d)
	}
	gitBefore := treeDigest(t, filepath.Join(dir, ".git"), true)
	if code, _, _ := runCLI(t, append([]string{"apply", "b", "--to", dir}, s...)...); code != 0 {
		t.Fatal("apply failed")
	}
	if d := diffDigests(want, treeDigest(t, dir, true, ".git")); d != "" {
		t.Fatalf("the folder differs from the branch after apply:\n%s", d)
	}
	if d := diffDigests(gitBefore, treeDigest(t, filepath.Join(dir, ".git"), true)); d != "" {
		t.Fatalf("apply changed .git:\n%s", d)
	}
	code, out, _ = runCLI(t, append([]string{"apply", "b", "--to", dir, "--json"}, s...)...)
	res = applyResult{}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Changes) != 0 || len(res.Already) == 0 {
		t.Fatalf("second apply: %d %q", code, out)
	}
	if code, _, stderr := runCLI(t, append([]string{"apply", "b"}, s...)...); code != exitUsage || !strings.Contains(stderr, "pass --to DIR") {
		t.Fatalf("apply without --to: %d %q", code, stderr)
	}
}

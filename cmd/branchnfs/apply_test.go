package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/go-git/go-billy/v5"
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
}

// TestApplyDefaultsToSourceFolder: without --to, apply writes into the
// folder main was imported from, read from the store in direct mode and
// from the server's status when one runs; with none recorded it asks for
// --to, in both modes.
func TestApplyDefaultsToSourceFolder(t *testing.T) {
	s, src := outputFixture(t)
	exported := filepath.Join(t.TempDir(), "out")
	if code, _, _ := runCLI(t, append([]string{"export", "b", exported}, s...)...); code != 0 {
		t.Fatal("export failed")
	}
	want := treeDigest(t, exported, true, ".git")

	// Direct mode: a dry run names the folder and leaves it alone.
	before := treeDigest(t, src, true)
	code, out, _ := runCLI(t, append([]string{"apply", "b", "--dry-run", "--json"}, s...)...)
	var res applyResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.To != src || len(res.Changes) == 0 {
		t.Fatalf("apply --dry-run without --to, direct: %d %q, want to %s", code, out, src)
	}
	if d := diffDigests(before, treeDigest(t, src, true)); d != "" {
		t.Fatalf("a dry run changed the folder:\n%s", d)
	}

	// API mode: the status carries the folder, and apply writes there.
	store := s[1]
	stop := startServe(t, store)
	c, st, err := control.Dial(context.Background(), control.SocketPath(store), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if st.SourceDir != src {
		t.Fatalf("status source_dir %q, want %q", st.SourceDir, src)
	}
	code, out, _ = runCLI(t, append([]string{"apply", "b", "--json"}, s...)...)
	res = applyResult{}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.To != src || len(res.Changes) == 0 {
		t.Fatalf("apply without --to, through the server: %d %q", code, out)
	}
	if d := diffDigests(want, treeDigest(t, src, true, ".git")); d != "" {
		t.Fatalf("the source folder differs from the branch after apply:\n%s", d)
	}
	stop()

	// Nothing recorded: a store made without --from.
	bare := []string{"--store", filepath.Join(shortTempDir(t), "s")}
	for _, args := range [][]string{{"init"}, {"fork", "main", "x"}} {
		if code, _, _ := runCLI(t, append(args, bare...)...); code != 0 {
			t.Fatalf("%v failed", args)
		}
	}
	if code, _, stderr := runCLI(t, append([]string{"apply", "x"}, bare...)...); code != exitUsage || !strings.Contains(stderr, "no recorded source folder: pass --to DIR") {
		t.Fatalf("apply without --to nor a recorded folder, direct: %d %q", code, stderr)
	}
	_, fake := fakeServer(t, 12049)
	if code, _, stderr := runCLI(t, "apply", "b1", "--store", fake); code != exitUsage || !strings.Contains(stderr, "no recorded source folder: pass --to DIR") {
		t.Fatalf("apply without --to nor a recorded folder, through a server: %d %q", code, stderr)
	}
}

// TestApplyGitBranch: apply --git-branch records the branch's changes as
// a commit on a new ref, which git show --stat lists exactly, and leaves
// the working tree, index and HEAD alone; where the branch made commits
// in its own .git, the ref carries them.
func TestApplyGitBranch(t *testing.T) {
	s, src := outputFixture(t)
	os.WriteFile(filepath.Join(src, ".gitignore"), []byte("*.log\n"), 0o644)
	gitIn(t, src, "add", ".gitignore")
	gitIn(t, src, "commit", "-q", "-m", "ignore logs")
	// The import was of the commit before: the repository moved on, as
	// a user's does; the ref still goes on the branch's own HEAD.
	headBefore := gitIn(t, src, "rev-parse", "HEAD")
	statusBefore := gitIn(t, src, "status", "--porcelain")
	inBranch(t, s[1], "b", func(fs billy.Filesystem) { writeFile(t, fs, "debug.log", "noise\n", 0o644) })

	code, out, _ := runCLI(t, append([]string{"apply", "b", "--to", src, "--git-branch", "agent/b", "--json"}, s...)...)
	var res gitApplyResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Ref != "refs/heads/agent/b" {
		t.Fatalf("apply --git-branch: %d %q", code, out)
	}
	if len(res.Ignored) != 1 || res.Ignored[0] != "debug.log" {
		t.Fatalf("ignored paths: %v", res.Ignored)
	}
	stat := gitIn(t, src, "show", "--stat=200", "--format=%P", "agent/b")
	t.Log(stat)
	var files []string
	for _, l := range strings.Split(stat, "\n") {
		if f, _, ok := strings.Cut(l, "|"); ok {
			files = append(files, strings.TrimSpace(f))
		}
	}
	want := []string{"bin.dat", "gone.txt", "link", "new.txt", "newdir/deep/x", "olddir/sub/f", "run.sh", "text.txt"}
	if strings.Join(files, ",") != strings.Join(want, ",") {
		t.Fatalf("git show --stat lists %v, want %v", files, want)
	}
	if parent := strings.Fields(stat)[0]; parent != res.Parent || res.Parent != res.Base {
		t.Fatalf("parent %s, result %+v", parent, res)
	}
	if gitIn(t, src, "rev-parse", "HEAD") != headBefore || gitIn(t, src, "status", "--porcelain") != statusBefore {
		t.Fatal("apply --git-branch changed HEAD, the index or the working tree")
	}
	if code, _, stderr := runCLI(t, append([]string{"apply", "b", "--to", src, "--git-branch", "agent/b"}, s...)...); code != exitExists || !strings.Contains(stderr, "exists") {
		t.Fatalf("apply --git-branch onto an existing ref: %d %q", code, stderr)
	}

	// The branch commits in its own .git: the ref carries that commit.
	work := copyTree(t, src)
	gitIn(t, work, "checkout", "-q", res.Base)
	os.WriteFile(filepath.Join(work, "text.txt"), []byte("one\n2\nthree\n"), 0o644)
	gitIn(t, work, "commit", "-q", "-am", "agent commit")
	agent := strings.TrimSpace(gitIn(t, work, "rev-parse", "HEAD"))
	inBranch(t, s[1], "b", func(fs billy.Filesystem) {
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
	if code, _, _ := runCLI(t, append([]string{"apply", "b", "--to", src, "--git-branch", "agent/c"}, s...)...); code != 0 {
		t.Fatal("apply --git-branch with the branch's commit failed")
	}
	log := gitIn(t, src, "log", "--format=%H %s", "-3", "agent/c")
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[1], agent+" agent commit") {
		t.Fatalf("agent/c does not carry the branch's commit %s:\n%s", agent, log)
	}
	// text.txt is committed by the agent: the top commit changes the rest.
	stat = gitIn(t, src, "show", "--stat=200", "--format=", "agent/c")
	if strings.Contains(stat, "text.txt") || !strings.Contains(stat, "new.txt") {
		t.Fatalf("top commit of agent/c:\n%s", stat)
	}
}

// TestApplySinceAndExportCheckpoint: apply --since writes only what came
// after the checkpoint; export --checkpoint writes the frozen state.
func TestApplySinceAndExportCheckpoint(t *testing.T) {
	s, src := outputFixture(t)
	if code, _, _ := runCLI(t, append([]string{"checkpoint", "b", "cp"}, s...)...); code != 0 {
		t.Fatal("checkpoint failed")
	}
	frozen := filepath.Join(t.TempDir(), "frozen")
	if code, _, _ := runCLI(t, append([]string{"export", "b", frozen}, s...)...); code != 0 {
		t.Fatal("export failed")
	}
	inBranch(t, s[1], "b", func(fs billy.Filesystem) { writeFile(t, fs, "later.txt", "later\n", 0o644) })
	atCP := filepath.Join(t.TempDir(), "cp")
	if code, _, _ := runCLI(t, append([]string{"export", "b", atCP, "--checkpoint", "cp"}, s...)...); code != 0 {
		t.Fatal("export --checkpoint failed")
	}
	if d := diffDigests(treeDigest(t, frozen, true), treeDigest(t, atCP, true)); d != "" {
		t.Fatalf("export --checkpoint differs from the state at the checkpoint:\n%s", d)
	}
	// The folder at the checkpoint, then apply --since cp: only later.txt.
	code, out, _ := runCLI(t, append([]string{"apply", "b", "--to", atCP, "--since", "cp", "--json"}, s...)...)
	var res applyResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Changes) != 1 || res.Changes[0].Path != "later.txt" {
		t.Fatalf("apply --since: %d %q", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(atCP, "later.txt")); err != nil || string(b) != "later\n" {
		t.Fatalf("later.txt after apply --since: %q %v", b, err)
	}
	// Into the folder at the fork, apply --since cp adds later.txt
	// alone: the changes before the checkpoint are not part of it.
	if code, _, _ := runCLI(t, append([]string{"apply", "b", "--to", src, "--since", "cp"}, s...)...); code != 0 {
		t.Fatalf("apply --since into the fork's folder: %d", code)
	}
	if b, err := os.ReadFile(filepath.Join(src, "later.txt")); err != nil || string(b) != "later\n" {
		t.Fatalf("later.txt: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "text.txt")); string(b) != "one\ntwo\nthree\n" {
		t.Fatalf("apply --since wrote a change from before the checkpoint: text.txt is %q", b)
	}
}

func TestApplyExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("%w: 2 paths", errApplyConflict), exitApplyConflict},
		{fmt.Errorf("%w: refs/heads/x", errRefExists), exitExists},
	} {
		if got := exitCode(tc.err); got != tc.code {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}
}

// TestApplyGitBranchNoRepository: a branch without .git cannot become a
// ref, and the message says what to do instead; the repository stays as
// it was.
func TestApplyGitBranchNoRepository(t *testing.T) {
	needGit(t)
	store := filepath.Join(shortTempDir(t), "s")
	s := []string{"--store", store}
	runCLI(t, append([]string{"init"}, s...)...)
	runCLI(t, append([]string{"fork", "main", "b"}, s...)...)
	repo := t.TempDir()
	gitIn(t, repo, "init", "-q")
	code, _, stderr := runCLI(t, append([]string{"apply", "b", "--to", repo, "--git-branch", "x"}, s...)...)
	if code != exitError || !strings.Contains(stderr, "has no git repository") || !strings.Contains(stderr, "apply --to DIR") {
		t.Fatalf("apply --git-branch of a branch without .git: %d %q", code, stderr)
	}
	if out := gitIn(t, repo, "for-each-ref"); out != "" {
		t.Fatalf("refs appeared: %q", out)
	}
	if code, _, stderr := runCLI(t, append([]string{"apply", "b", "--to", t.TempDir(), "--git-branch", "x"}, s...)...); code != exitError || !strings.Contains(stderr, "not a git repository") {
		t.Fatalf("apply --git-branch into a plain folder: %d %q", code, stderr)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
)

// TestMain lets this test binary serve as the attempt helper.
func TestMain(m *testing.M) {
	attempt.RunHelper()
	os.Exit(m.Run())
}

// newStoreWith creates a store with the given branches forked from main.
func newStoreWith(t *testing.T, names ...string) string {
	t.Helper()
	store := shortTempDir(t)
	if code, _, _ := runCLI(t, "init", "--store", store); code != 0 {
		t.Fatalf("init: exit %d", code)
	}
	for _, n := range names {
		if code, _, _ := runCLI(t, "fork", "main", n, "--store", store); code != 0 {
			t.Fatalf("fork %s: exit %d", n, code)
		}
	}
	return store
}

func TestExecWithoutMount(t *testing.T) {
	store := newStoreWith(t, "b")
	code, _, stderr := runCLI(t, "exec", "b", "--store", store, "--", "true")
	if code != exitMountFailed || !strings.Contains(stderr, "serve --mount") {
		t.Fatalf("exit %d, stderr %q: want %d and how to get a mount", code, stderr, exitMountFailed)
	}
	code, _, stderr = runCLI(t, "exec", "b", "--store", store, "--mount", t.TempDir(), "--", "true")
	if code != exitMountFailed || !strings.Contains(stderr, "not a mount point") {
		t.Fatalf("exit %d, stderr %q: want %d for a directory that is no mount", code, stderr, exitMountFailed)
	}
}

func TestExecUsage(t *testing.T) {
	store := newStoreWith(t)
	for _, args := range [][]string{
		{"exec", "b"},
		{"exec", "b", "c", "--", "true"},
		{"exec", "b", "--on-exit", "maybe", "--", "true"},
		{"race", "main", "-c", "true", "-n", "2", "--", "true"},
		{"race", "main"},
		{"best-of", "main", "--", "true"},
	} {
		if code, _, _ := runCLI(t, append(args, "--store", store)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestExecExitStatus(t *testing.T) {
	store := newStoreWith(t, "b")
	root := t.TempDir()
	for _, tc := range []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"kill -KILL $$", 128 + 9},
	} {
		code, _, _ := runCLI(t, "exec", "b", "--store", store, "--workdir-root", root, "--", "/bin/sh", "-c", tc.script)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d", tc.script, code, tc.code)
		}
	}
}

func TestExecCommitJSON(t *testing.T) {
	store := newStoreWith(t, "b")
	root := t.TempDir()
	code, stdout, _ := runCLI(t, "exec", "b", "--store", store, "--workdir-root", root, "--on-exit", "commit", "--json",
		"--", "/bin/sh", "-c", `echo "out:$BRANCHNFS_BRANCH"; pwd > where`)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	out, js, ok := strings.Cut(stdout, "\n")
	if !ok || out != "out:b" {
		t.Fatalf("stdout %q: want the command's output first", stdout)
	}
	var rec runner.Record
	if err := json.Unmarshal([]byte(js), &rec); err != nil {
		t.Fatalf("record %q: %v", js, err)
	}
	if rec.State != branches.StateCommitted || rec.Branch != "b" || rec.Parent != "main" || rec.Commit == nil {
		t.Fatalf("record %+v: want b committed into main", rec)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "b", "where")); !strings.HasSuffix(strings.TrimSpace(string(b)), "/b") {
		t.Fatalf("ran in %q, want ROOT/b", b)
	}
}

func TestRaceCLI(t *testing.T) {
	store := newStoreWith(t)
	root := t.TempDir()
	code, stdout, _ := runCLI(t, "race", "main", "--store", store, "--workdir-root", root, "--json", "--grace", "100ms",
		"-c", "exit 1", "-c", "echo done > f", "-c", "sleep 1000")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var recs []runner.Record
	if err := json.Unmarshal([]byte(stdout), &recs); err != nil {
		t.Fatal(err)
	}
	want := []branches.State{branches.StateAborted, branches.StateCommitted, branches.StateAborted}
	for i, r := range recs {
		if r.State != want[i] || r.Log == "" {
			t.Fatalf("attempt %d: %+v, want %s with a log", i, r, want[i])
		}
	}
	if recs[2].KilledBy != runner.KilledBySibling {
		t.Fatalf("attempt 2: %+v, want killed by its sibling", recs[2])
	}
	code, stdout, _ = runCLI(t, "race", "main", "--store", store, "--workdir-root", root, "-n", "2", "--", "false")
	if code != exitError || !strings.Contains(stdout, "aborted") {
		t.Fatalf("race of failures: exit %d, stdout %q: want %d and a table", code, stdout, exitError)
	}
}

func TestBestOfCLI(t *testing.T) {
	store := newStoreWith(t)
	root := t.TempDir()
	code, stdout, _ := runCLI(t, "best-of", "main", "-n", "3", "--store", store, "--workdir-root", root, "--json",
		"--", "/bin/sh", "-c", `echo "${BRANCHNFS_BRANCH##*-}" >&3`)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var recs []runner.Record
	if err := json.Unmarshal([]byte(stdout), &recs); err != nil {
		t.Fatal(err)
	}
	if recs[2].State != branches.StateCommitted || recs[2].Score == nil || *recs[2].Score != 2 {
		t.Fatalf("attempt 2: %+v, want the best score (2), committed", recs[2])
	}
}

func TestListLabelSortScore(t *testing.T) {
	store := newStoreWith(t, "other")
	root := t.TempDir()
	code, _, _ := runCLI(t, "best-of", "main", "-n", "3", "--keep", "2", "--store", store, "--workdir-root", root,
		"--", "/bin/sh", "-c", `echo "${BRANCHNFS_BRANCH##*-}" >&3`)
	if code != 0 {
		t.Fatalf("best-of --keep 2: exit %d", code)
	}
	code, stdout, _ := runCLI(t, "list", "--store", store, "--json", "--label", "runner=best-of", "--sort", "score")
	if code != 0 {
		t.Fatalf("list: exit %d", code)
	}
	var es []listEntry
	if err := json.Unmarshal([]byte(stdout), &es); err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Score == nil || *es[0].Score != 2 || *es[1].Score != 1 || es[0].Labels["attempt"] == "" {
		t.Fatalf("list --label runner=best-of --sort score: %+v: want the two kept, best first", es)
	}
	code, stdout, _ = runCLI(t, "list", "--store", store, "--sort", "score")
	if code != 0 || !strings.HasPrefix(strings.Split(stdout, "\n")[1], es[0].Name+" ") {
		t.Fatalf("list --sort score: exit %d:\n%s", code, stdout)
	}
	if code, _, _ := runCLI(t, "list", "--store", store, "--label", "nokey"); code != exitUsage {
		t.Fatalf("--label without =: exit %d", code)
	}
}

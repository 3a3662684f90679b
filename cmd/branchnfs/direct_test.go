package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// TestDirectMode runs the branch commands with no server: the CLI opens
// the store itself.
func TestDirectMode(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	s := []string{"--store", store}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello"), 0o640)
	os.Mkdir(filepath.Join(src, "sub"), 0o755)
	os.Symlink("../a.txt", filepath.Join(src, "sub", "link"))

	code, out, stderr := runCLI(t, append([]string{"init", "--from", src}, s...)...)
	if code != 0 || !strings.Contains(out, "created store") || !strings.Contains(stderr, "imported 1 files, 1 dirs, 1 symlinks") {
		t.Fatalf("init --from: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := runCLI(t, append([]string{"init"}, s...)...); code != exitExists || !strings.Contains(stderr, "already exists") {
		t.Fatalf("second init: %d %q", code, stderr)
	}
	if code, out, _ := runCLI(t, append([]string{"fork", "main", "b1"}, s...)...); code != 0 || out != "/b1\n" {
		t.Fatalf("fork: %d %q", code, out)
	}
	runCLI(t, append([]string{"fork", "main", "b2"}, s...)...)
	if code, out, _ := runCLI(t, append([]string{"checkpoint", "b1", "cp"}, s...)...); code != 0 || !strings.Contains(out, "checkpoint cp of b1") {
		t.Fatalf("checkpoint: %d %q", code, out)
	}
	if code, _, _ := runCLI(t, append([]string{"restore", "b1", "cp"}, s...)...); code != 0 {
		t.Fatalf("restore: %d", code)
	}
	code, out, _ = runCLI(t, append([]string{"diff", "b1", "--json"}, s...)...)
	var d branches.Diff
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Branch != "b1" || d.Changes == nil {
		t.Fatalf("diff --json: %d %q", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"commit", "b1", "--json"}, s...)...)
	var cr branches.CommitResult
	if code != 0 || json.Unmarshal([]byte(out), &cr) != nil || cr.Parent != "main" || len(cr.Invalidated) != 1 || cr.Invalidated[0] != "b2" {
		t.Fatalf("commit --json: %d %q", code, out)
	}
	// b1 brought nothing: the answer counts merged paths, and claims no
	// "changes" count it did not make.
	if strings.Contains(out, `"changes"`) || !strings.Contains(out, `"merged_paths": 0`) {
		t.Fatalf("commit --json: %q, want merged_paths 0 and no changes count", out)
	}
	if code, _, stderr := runCLI(t, append([]string{"commit", "b2"}, s...)...); code != exitInvalidated || !strings.Contains(stderr, "commit of b1") {
		t.Fatalf("commit of invalidated: %d %q", code, stderr)
	}
	// Abort cleans an invalidated branch up.
	if code, out, _ := runCLI(t, append([]string{"abort", "b2"}, s...)...); code != 0 || out != "aborted b2\n" {
		t.Fatalf("abort of invalidated: %d %q", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"list", "--json"}, s...)...)
	var infos []branches.Info
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil {
		t.Fatalf("list --json: %d %q", code, out)
	}
	if len(infos) != 1 || infos[0].Name != "main" {
		t.Fatalf("list after commit and abort: %+v", infos)
	}
	for _, in := range infos {
		if strings.HasPrefix(in.Name, ".import-") {
			t.Fatalf("import branch left behind: %+v", in)
		}
	}
	// The store lock is released after every command.
	if code, _, _ := runCLI(t, append([]string{"list"}, s...)...); code != 0 {
		t.Fatalf("list: %d", code)
	}
}

func TestStoreBusy(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	if code, _, _ := runCLI(t, "init", "--store", store); code != 0 {
		t.Fatal(code)
	}
	lk, err := lockStore(store)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.unlock()
	code, _, stderr := runCLI(t, "list", "--store", store)
	if code != exitStoreBusy || !strings.Contains(stderr, "in use by another branchnfs process") {
		t.Fatalf("list on a locked store: %d %q", code, stderr)
	}
}

func TestImportFailureLeavesMainEmpty(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	code, _, stderr := runCLI(t, "init", "--from", filepath.Join(t.TempDir(), "missing"), "--store", store)
	if code == 0 || !strings.Contains(stderr, "nothing was imported") {
		t.Fatalf("init --from missing dir: %d %q", code, stderr)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Fatalf("failed init left a store behind: %v", err)
	}
	// So the same command can be run again once the source is there.
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	if code, _, stderr := runCLI(t, "init", "--from", src, "--store", store); code != 0 {
		t.Fatalf("init after a failed init: %d %q", code, stderr)
	}
}

func TestDefaultStoreDir(t *testing.T) {
	t.Setenv("BRANCHNFS_STORE", "")
	t.Setenv("XDG_DATA_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	g := &globalOptions{}
	d, err := g.storeDir()
	want := map[string]string{"linux": "/xdg/branchnfs", "darwin": "/home/u/Library/Application Support/branchnfs"}[runtime.GOOS]
	if err != nil || d != want {
		t.Fatalf("default store = %q, %v; want %q", d, err, want)
	}
	t.Setenv("BRANCHNFS_STORE", "/env/store")
	if d, _ := g.storeDir(); d != "/env/store" {
		t.Fatalf("$BRANCHNFS_STORE ignored: %q", d)
	}
	g.Store = "/flag/store"
	if d, _ := g.storeDir(); d != "/flag/store" {
		t.Fatalf("--store ignored: %q", d)
	}
}

// An initial import cut short by a crash leaves its marker and temporary
// branch; the next init --from drops them and imports again.
func TestInterruptedImportIsRedone(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	if code, _, _ := runCLI(t, "init", "--store", store); code != 0 {
		t.Fatal(code)
	}
	// Simulate the crash: a temporary import branch and the marker.
	s, err := openStore(context.Background(), store, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.mgr.Fork(context.Background(), "main", importPrefix+"1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	os.WriteFile(filepath.Join(store, importPendingName), []byte("/src\n"), 0o600)

	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	code, _, stderr := runCLI(t, "init", "--from", src, "--store", store)
	if code != 0 || !strings.Contains(stderr, "was interrupted") || !strings.Contains(stderr, "imported 1 files") {
		t.Fatalf("init after an interrupted import: %d %q", code, stderr)
	}
	code, out, _ := runCLI(t, "list", "--json", "--store", store)
	var infos []branches.Info
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil || len(infos) != 1 {
		t.Fatalf("leftover import branch: %s", out)
	}
	// The marker is gone: a third init says the store exists.
	if code, _, _ := runCLI(t, "init", "--store", store); code != exitExists {
		t.Fatalf("init of an initialised store: %d", code)
	}
	// A marker left after a completed import is only cleaned up.
	os.WriteFile(filepath.Join(store, importPendingName), []byte("/src\n"), 0o600)
	if code, _, stderr := runCLI(t, "init", "--from", src, "--store", store); code != exitExists {
		t.Fatalf("init over a completed import: %d %q", code, stderr)
	}
	if importPending(store) {
		t.Fatal("marker left behind")
	}
}

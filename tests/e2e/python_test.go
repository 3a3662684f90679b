package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// python3 finds Debian's python3 (the test command installs it), which a
// regular user can run, unlike a per-user install under root's home.
func python3(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("python3 not found: scripts/test.sh installs it (apt-get install python3)")
	}
	t.Skip("python3 not found: apt-get install python3 to run the Python client's tests")
	return ""
}

// TestPythonClient runs the Python client's unittest suite
// (clients/python/tests) against a real server, as a regular user.
func TestPythonClient(t *testing.T) {
	py := python3(t)
	store := newStore(t)
	owner := storeOwner(store)
	root := userDir(t, owner)
	srv := startServer(t, store, 0, "--workdir-root", filepath.Join(root, "work"))
	// A copy the regular user can read.
	client := filepath.Join(root, "python")
	if out, err := exec.Command("cp", "-r", "../../clients/python", client).CombinedOutput(); err != nil {
		t.Fatalf("copy the client: %v: %s", err, out)
	}
	chownTree(t, client, owner)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "tests")
	cmd.Dir = client
	cmd.Env = []string{"BRANCHNFS_STORE=" + store, "PYTHONPATH=" + client, "PYTHONDONTWRITEBYTECODE=1", "HOME=" + root, "PATH=/usr/bin:/bin"}
	runAs(cmd, owner)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s\n%s", cmd.String(), out.String())
	if err != nil {
		t.Fatalf("python client tests: %v", err)
	}

	// Workspace.patch of a branch with a change (the suite's commits
	// into main would invalidate it, so it runs after them).
	mustCLI(t, store, "fork", "main", "py-patch")
	tg, _ := dial(t, srv.port).mount(t, "/py-patch")
	writeFile(t, tg, "hello.txt", []byte("hello\n"))
	cmd = exec.CommandContext(ctx, py, "-c", "import sys, branchnfs; sys.stdout.buffer.write(branchnfs.Workspace.connect().patch('py-patch'))")
	cmd.Dir = client
	cmd.Env = []string{"BRANCHNFS_STORE=" + store, "PYTHONPATH=" + client, "PYTHONDONTWRITEBYTECODE=1", "HOME=" + root, "PATH=/usr/bin:/bin"}
	runAs(cmd, owner)
	patch, err := cmd.Output()
	if want := "diff --git a/hello.txt b/hello.txt\nnew file mode 100644\n"; err != nil || !strings.Contains(string(patch), want) || !strings.Contains(string(patch), "\n+hello\n") {
		t.Fatalf("Workspace.patch: %v\n%s", err, patch)
	}
}

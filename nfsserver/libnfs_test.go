package nfsserver

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLibnfs drives the server with Debian's libnfs-utils (nfs-cp,
// nfs-cat, nfs-ls), an independent client implementation.
func TestLibnfs(t *testing.T) {
	for _, tool := range []string{"nfs-ls", "nfs-cp", "nfs-cat"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("%s not found (Debian: apt-get install -y libnfs-utils)", tool)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	m := newManager(t, "")
	_, addr := startServer(t, m, nil)
	_, port, _ := net.SplitHostPort(addr)
	url := func(path string) string {
		return fmt.Sprintf("nfs://127.0.0.1%s?nfsport=%s&mountport=%s&uid=0&gid=0", path, port, port)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	src := filepath.Join(t.TempDir(), "src")
	payload := bytes.Repeat([]byte("libnfs payload\n"), 200000) // 3 MB
	if err := os.WriteFile(src, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	run("nfs-cp", src, url("/main/copied.txt"))
	if got := run("nfs-cat", url("/main/copied.txt")); got != string(payload) {
		t.Fatalf("nfs-cat returned %d bytes, want %d", len(got), len(payload))
	}
	if out := run("nfs-ls", url("/main/")); !strings.Contains(out, "copied.txt") {
		t.Fatalf("nfs-ls /main:\n%s", out)
	}
	// The root export lists the branches.
	if out := run("nfs-ls", url("/")); !strings.Contains(out, "main") {
		t.Fatalf("nfs-ls /:\n%s", out)
	}
}

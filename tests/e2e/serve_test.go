package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// serve --from imports into a new store, prints the mount commands, and
// `mount --print` finds the server's port; SIGINT stops it cleanly and a
// later serve --from on the existing store leaves main alone.
func TestServeFromPrintsMountsAndStopsCleanly(t *testing.T) {
	src := userDir(t, regularUser)
	os.WriteFile(filepath.Join(src, "readme.txt"), []byte("imported"), 0o644)
	os.Symlink("readme.txt", filepath.Join(src, "link"))
	store := newStore(t)
	srv := startServer(t, store, 0, "--from", src)
	c := dial(t, srv.port)
	mainT, _ := c.mount(t, "/main")
	if got := mustRead(t, mainT, "/readme.txt"); string(got) != "imported" {
		t.Fatalf("readme.txt = %q", got)
	}
	cl, st, err := control.Dial(context.Background(), control.SocketPath(store), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if m, ok := st.NFS.(map[string]any); !ok || m["Requests"].(float64) < 1 {
		t.Fatalf("status has no NFS counters: %+v", st)
	}
	// The API token: the store owner's alone, kept across restarts.
	tokenPath := control.TokenPath(store)
	fi, err := os.Stat(tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	if sys := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o600 || sys.Uid != regularUser.uid {
		t.Fatalf("%s: mode %v, owner %d; want 0600 and %d", tokenPath, fi.Mode(), sys.Uid, regularUser.uid)
	}
	token, err := control.ReadToken(tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	out := srv.out.String()
	for _, want := range []string{"imported 1 files, 0 dirs, 1 symlinks", "127.0.0.1:/main", "127.0.0.1:/ ", "control.sock"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve output lacks %q:\n%s", want, out)
		}
	}
	mustCLI(t, store, "fork", "main", "b1")
	got := mustCLI(t, store, "mount", "b1", "/mnt/b1", "--print", "--os", "linux")
	port := strings.Split(strings.Split(got, "port=")[1], ",")[0]
	if want := strings.TrimSpace(got); !strings.HasPrefix(want, "mount -t nfs -o vers=3,proto=tcp,port=") || !strings.HasSuffix(want, " 127.0.0.1:/b1 /mnt/b1") || port != itoa(srv.port) {
		t.Fatalf("mount --print = %q, server port %d", got, srv.port)
	}

	// SIGINT: clean stop, exit 0, socket gone.
	srv.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-srv.done:
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop after SIGINT")
	}
	if srv.Err() != nil {
		t.Fatalf("serve after SIGINT: %v", srv.Err())
	}
	if _, err := os.Stat(filepath.Join(store, "control.sock")); !os.IsNotExist(err) {
		t.Fatalf("control socket left behind: %v", err)
	}
	if again, err := control.ReadToken(tokenPath); err != nil || again != token {
		t.Fatalf("token after a clean stop: %q %v, want it kept", again, err)
	}

	// A second serve --from on the existing store does not import again.
	other := userDir(t, regularUser)
	os.WriteFile(filepath.Join(other, "other.txt"), []byte("x"), 0o644)
	srv = startServer(t, store, 0, "--from", other)
	if !strings.Contains(srv.out.String(), "ignoring --from") {
		t.Fatalf("serve --from on an existing store: %s", srv.out.String())
	}
	if again, err := control.ReadToken(tokenPath); err != nil || again != token {
		t.Fatalf("token after a restart: %q %v, want the same", again, err)
	}
	c = dial(t, srv.port)
	mainT, _ = c.mount(t, "/main")
	if _, err := readFile(mainT, "/other.txt"); err == nil {
		t.Fatal("second --from imported into an existing store")
	}
	// While a server runs, a second one on the same store is refused.
	cmd := exec.Command(binPath, "serve", "--store", store, "--listen", "127.0.0.1:0")
	runAs(cmd, regularUser)
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 12 || !strings.Contains(string(b), "already serves") {
		t.Fatalf("second serve: %v %s", err, b)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// With no --store, serve uses $BRANCHNFS_STORE, else the per-user data
// directory, creating the store and main on first use.
func TestServeDefaultStore(t *testing.T) {
	data := userDir(t, regularUser)
	env := append(os.Environ(), "BRANCHNFS_STORE=", "XDG_DATA_HOME="+data, "HOME="+data)
	cmd := exec.Command(binPath, "serve", "--listen", "127.0.0.1:0")
	cmd.Env = env
	runAs(cmd, regularUser)
	var out testbin.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	want := filepath.Join(data, "branchnfs")
	if runtime.GOOS == "darwin" {
		want = filepath.Join(data, "Library", "Application Support", "branchnfs")
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "live branches") {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "serving "+want+" on 127.0.0.1:") || !strings.Contains(out.String(), "created store "+want) {
		t.Fatalf("serve output:\n%s", out.String())
	}
	list := exec.Command(binPath, "list")
	list.Env = env
	runAs(list, regularUser)
	b, err := list.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "main") {
		t.Fatalf("list on the default store: %v %s", err, b)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, out.String())
	}
}

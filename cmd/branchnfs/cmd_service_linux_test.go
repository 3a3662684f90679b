package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestServeNotifiesSystemd: started as the unit starts it, with
// $NOTIFY_SOCKET, a server run by a regular user sends READY=1 once its
// NFS port answers, once, and STOPPING=1 on SIGTERM before it exits
// cleanly. While it runs, status shows its version.
func TestServeNotifiesSystemd(t *testing.T) {
	bin := branchnfsBinary(t)
	dir := userDir(t, "bnfs-notify-")
	store := filepath.Join(dir, "store")
	sockPath := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	u := asUser()
	if err := os.Chown(sockPath, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	next := func(wait time.Duration) (string, bool) {
		conn.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			return "", false
		}
		return string(buf[:n]), true
	}

	env := []string{"NOTIFY_SOCKET=" + sockPath, "HOME=" + dir}
	cmd := exec.Command(bin, "serve", "--store", store, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), env...)
	u.Apply(cmd)
	out := &testbin.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server output:\n%s", out.String())
		}
	}()

	msg, ok := next(60 * time.Second)
	if !ok {
		t.Fatal("no notification within 60 s")
	}
	// The first notification is READY, sent once the port answers.
	addr := ""
	for _, line := range strings.Split(msg, "\n") {
		if a, ok := strings.CutPrefix(line, "STATUS=serving NFS on "); ok {
			addr = a
		}
	}
	if !strings.Contains(msg, "READY=1") || addr == "" {
		t.Fatalf("first notification %q, want READY=1 with the address", msg)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("READY=1 sent but the NFS port %s does not answer: %v", addr, err)
	}
	c.Close()

	// status (through the control API) names the server's version.
	code, sout, _ := runAs(t, bin, env, "status", "--json", "--store", store)
	var st storeStatus
	if code != 0 || json.Unmarshal([]byte(sout), &st) != nil || st.Server == nil || st.Server.Version == "" {
		t.Fatalf("status --json: %d %q", code, sout)
	}
	_, vout, _ := runAs(t, bin, nil, "version", "--json")
	var v buildVersion
	if json.Unmarshal([]byte(vout), &v) != nil || v.Version != st.Server.Version {
		t.Fatalf("status shows server version %q, version says %q", st.Server.Version, vout)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	msg, ok = next(60 * time.Second)
	if !ok || !strings.Contains(msg, "STOPPING=1") {
		t.Fatalf("after SIGTERM: %q (%v), want STOPPING=1", msg, ok)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not exit within 60 s of SIGTERM")
	}
	if msg, ok := next(100 * time.Millisecond); ok {
		t.Fatalf("notification after STOPPING: %q", msg)
	}
}

// userManagerRuns reports whether a systemd user manager answers the
// test user.
func userManagerRuns(t *testing.T) bool {
	cmd := exec.Command("systemctl", "--user", "show-environment")
	asUser().Apply(cmd)
	return cmd.Run() == nil
}

// TestServiceInstallFiles: install writes the unit with the serve flags
// given and asks systemd to reload, enable and restart it; install again
// updates the flags; status reads them and systemd's state back, and
// names mounts of a stopped server; uninstall stops the unit and removes
// it. Run as a regular user with a fake HOME. This machine runs no
// systemd user manager (no user session), so a systemctl on PATH that
// logs its arguments and answers "show" stands in for the real one.
func TestServiceInstallFiles(t *testing.T) {
	if userManagerRuns(t) {
		t.Log("a systemd user manager runs: the shim still stands in, so that the test starts no real service")
	}
	bin := branchnfsBinary(t)
	home := userDir(t, "bnfs-home-")
	shim := testbin.SharedTempDir(t, "bnfs-shim-")
	logFile := filepath.Join(home, "systemctl.log")
	script := `#!/bin/sh
echo "$*" >> "` + logFile + `"
case "$*" in
*show*) printf 'LoadState=loaded\nActiveState=failed\nSubState=failed\nMainPID=0\n' ;;
esac
[ -z "$SHIM_FAIL" ] || { echo "Failed to connect to bus: No medium found" >&2; exit 1; }
`
	if err := os.WriteFile(filepath.Join(shim, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=", "BRANCHNFS_STORE=", "PATH=" + shim + ":" + os.Getenv("PATH")}
	store := filepath.Join(home, "store")
	unit := filepath.Join(home, ".config", "systemd", "user", serviceUnitName)
	calls := func() string {
		b, _ := os.ReadFile(logFile)
		os.Remove(logFile)
		return string(b)
	}

	code, out, _ := runAs(t, bin, env, "service", "install", "--store", store, "--listen", "127.0.0.1:12999", "--binary", bin)
	if code != 0 || !strings.Contains(out, "installed "+unit) || !strings.Contains(out, "loginctl enable-linger") {
		t.Fatalf("install: %d %q", code, out)
	}
	if c := calls(); c != "--user daemon-reload\n--user enable branchnfs.service\n--user restart branchnfs.service\n" {
		t.Fatalf("install ran systemctl %q", c)
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	want := systemdUnit(serviceSpec{Binary: bin, Args: serveArgs(store, "127.0.0.1:12999", "", "")})
	if !bytes.Equal(b, want) {
		t.Fatalf("unit:\n%s\nwant:\n%s", b, want)
	}

	mnt := filepath.Join(home, "mnt")
	code, out, _ = runAs(t, bin, env, "service", "install", "--store", store, "--mount", mnt, "--binary", bin)
	if code != 0 || !strings.Contains(out, "updated "+unit) {
		t.Fatalf("install again: %d %q", code, out)
	}
	calls()
	b, _ = os.ReadFile(unit)
	if args, _ := serviceArgsOf(b); flagValue(args, "--mount") != mnt || flagValue(args, "--listen") != "" {
		t.Fatalf("updated unit runs %q", args)
	}

	code, out, _ = runAs(t, bin, env, "service", "status", "--json")
	var st serviceStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: %d %q", code, out)
	}
	if !st.Installed || !st.Loaded || st.Running || st.Store != store || st.File != unit || st.State != "failed (failed)" ||
		!strings.Contains(st.Log, "journalctl --user -u branchnfs.service") || st.StaleMounts {
		t.Fatalf("status --json: %+v", st)
	}
	code, out, _ = runAs(t, bin, env, "service", "status")
	if code != 0 || !strings.Contains(out, "running:  no (failed (failed))") || !strings.Contains(out, "systemctl --user start") {
		t.Fatalf("status: %d %q", code, out)
	}

	// systemctl --user without a user manager: the error says what to do.
	code, _, stderr := runAs(t, bin, append(env, "SHIM_FAIL=1"), "service", "install", "--store", store, "--binary", bin)
	if code == 0 || !strings.Contains(stderr, "enable-linger") || !strings.Contains(stderr, "No medium found") {
		t.Fatalf("install without a user manager: %d %q", code, stderr)
	}
	calls()

	code, out, _ = runAs(t, bin, env, "service", "uninstall")
	if code != 0 || !strings.Contains(out, "stopped and removed "+unit) {
		t.Fatalf("uninstall: %d %q", code, out)
	}
	if c := calls(); c != "--user disable --now branchnfs.service\n--user daemon-reload\n" {
		t.Fatalf("uninstall ran systemctl %q", c)
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Fatalf("the unit is still there: %v", err)
	}
	if code, out, _ := runAs(t, bin, env, "service", "uninstall"); code != 0 || !strings.Contains(out, "not installed") {
		t.Fatalf("uninstall again: %d %q", code, out)
	}
	code, out, _ = runAs(t, bin, env, "service", "status", "--json")
	st = serviceStatus{}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Installed || len(st.Hints) == 0 || !strings.Contains(st.Hints[0], "service install") {
		t.Fatalf("status after uninstall: %d %q", code, out)
	}
}

// TestServiceStatusStaleMounts: with no server answering and NFS mounts
// of its port still in the mount table, status says so and how to
// unmount.
func TestServiceStatusStaleMounts(t *testing.T) {
	mounts := "127.0.0.1:/ /home/me/mnt/all nfs rw,relatime,vers=3,port=12049,mountport=12049 0 0\n" +
		"127.0.0.1:/other /mnt/x nfs rw,port=13000 0 0\n"
	got := parseProcMounts(mounts, 12049)
	st := serviceStatus{Mounts: got, Installed: true}
	finishServiceStatus(&st, false)
	if !st.StaleMounts || len(st.Mounts) != 1 {
		t.Fatalf("%+v", st)
	}
	var b bytes.Buffer
	printServiceStatus(&b, st)
	if !strings.Contains(b.String(), "mount:    127.0.0.1:/ on /home/me/mnt/all") || !strings.Contains(b.String(), "umount -f -l DIR") {
		t.Fatalf("status does not show the stale mount and how to unmount it:\n%s", b.String())
	}
	st = serviceStatus{Mounts: got, Installed: true, Running: true}
	finishServiceStatus(&st, true)
	if st.StaleMounts {
		t.Fatalf("mounts of a running server called stale: %+v", st)
	}
}

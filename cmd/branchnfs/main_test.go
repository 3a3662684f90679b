package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/branchnfs/branchnfs/nfsserver/control/controltest"
)

// runCLI runs one command line in-process.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	t.Logf("branchnfs %s -> %d\n%s%s", strings.Join(args, " "), code, o.String(), e.String())
	return code, o.String(), e.String()
}

// shortTempDir is a temp dir short enough for a unix socket path.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "bnfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fakeServer serves a fake backend on the control socket of a new store
// directory, as a running `branchnfs serve` would.
func fakeServer(t *testing.T, port int) (*controltest.Fake, string) {
	t.Helper()
	dir := shortTempDir(t)
	fb := controltest.New()
	token, err := control.EnsureToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := control.NewServer(control.ServerOptions{Backend: fb, Token: token, Status: func() control.Status {
		return control.Status{PID: 1, Store: dir, Listen: fmt.Sprintf("127.0.0.1:%d", port), Port: port}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := control.Listen(control.SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return fb, dir
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		err  error
		code int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitError},
		{usagef("bad"), exitUsage},
		{fmt.Errorf("run: %w", context.Canceled), exitInterrupted},
		{fmt.Errorf("%w: x", branches.ErrNotFound), exitNotFound},
		{branches.ErrExists, exitExists},
		{errStoreExists, exitExists},
		{branches.ErrInvalidName, exitInvalidName},
		{&branches.InvalidatedError{Branch: "a", By: "commit of b into main"}, exitInvalidated},
		{branches.ErrStale, exitInvalidated},
		{&branches.ConflictError{Branch: "a", Parent: "main", Paths: []string{"x"}}, exitConflict},
		{&branches.HasChildrenError{Branch: "a", Children: []string{"b"}}, exitHasChildren},
		{branches.ErrReadOnly, exitReadOnly},
		{branches.ErrNoSpace, exitNoSpace},
		{&os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, exitNoSpace},
		{errNoStore, exitNoStore},
		{errStoreBusy, exitStoreBusy},
		{errMountFailed, exitMountFailed},
		{&control.Error{Code: control.CodeConflict}, exitConflict},
		{&control.Error{Code: control.CodeBadRequest}, exitUsage},
		{&control.InUseError{Branch: "a", Clients: []string{"mac:/a mounted"}}, exitInUse},
		{&control.Error{Code: control.CodeInUse}, exitInUse},
	}
	seen := map[int]bool{}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.code {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.code)
		}
		seen[tt.code] = true
	}
	if len(seen) != 16 {
		t.Errorf("%d distinct exit codes, want 16", len(seen))
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"fork", "main"}, "fork needs 2 argument(s): PARENT NAME"},
		{[]string{"commit"}, "commit needs 1 argument(s): NAME"},
		{[]string{"list", "extra"}, "list needs 0 argument(s)"},
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"list", "--nosuch"}, "unknown flag: --nosuch"},
		{[]string{"serve", "--listen", "0.0.0.0:2049"}, "not a loopback address"},
		{[]string{"serve", "--listen", "nonsense"}, "--listen"},
		{[]string{"serve", "--log-level", "loud"}, "--log-level"},
		{[]string{"mount", "b", "/mnt", "--print", "--os", "plan9"}, "no mount command for OS"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			code, _, stderr := runCLI(t, append(tt.args, "--store", shortTempDir(t))...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, tt.want)
			}
		})
	}
}

func TestCheckListen(t *testing.T) {
	for _, l := range []string{"127.0.0.1:12049", "localhost:1", "[::1]:2049", "127.0.0.2:0"} {
		var w bytes.Buffer
		if err := checkListen(l, false, &w); err != nil || w.Len() != 0 {
			t.Errorf("%s: %v %q", l, err, w.String())
		}
	}
	for _, l := range []string{"0.0.0.0:12049", ":12049", "192.168.1.2:2049", "[::]:1"} {
		var w bytes.Buffer
		if err := checkListen(l, false, &w); exitCode(err) != exitUsage {
			t.Errorf("%s without --allow-remote: %v", l, err)
		}
		if err := checkListen(l, true, &w); err != nil || !strings.Contains(w.String(), "WARNING") {
			t.Errorf("%s with --allow-remote: %v, warning %q", l, err, w.String())
		}
	}
}

// TestMountPrint checks the exact mount commands the README documents.
func TestMountPrint(t *testing.T) {
	fb, store := fakeServer(t, 23456)
	if _, err := fb.Fork(context.Background(), "main", "b1"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		os, name, dir, want string
	}{
		{"darwin", "b1", "/Users/me/mnt/b1",
			"/sbin/mount_nfs -o vers=3,tcp,port=23456,mountport=23456,locallocks,soft,intr,timeo=100,retrans=5,nobrowse,noquota,nosuid,nodev,rsize=1048576,wsize=1048576,readahead=16 127.0.0.1:/b1 /Users/me/mnt/b1"},
		{"linux", "b1", "/mnt/b1",
			"mount -t nfs -o vers=3,proto=tcp,port=23456,mountport=23456,mountproto=tcp,nolock,noacl,nosuid,nodev,rsize=1048576,wsize=1048576,hard 127.0.0.1:/b1 /mnt/b1"},
		{"linux", "/", "/mnt/all",
			"mount -t nfs -o vers=3,proto=tcp,port=23456,mountport=23456,mountproto=tcp,nolock,noacl,nosuid,nodev,rsize=1048576,wsize=1048576,hard 127.0.0.1:/ /mnt/all"},
		{"darwin", "main", "/Users/me/My Mounts/main",
			"/sbin/mount_nfs -o vers=3,tcp,port=23456,mountport=23456,locallocks,soft,intr,timeo=100,retrans=5,nobrowse,noquota,nosuid,nodev,rsize=1048576,wsize=1048576,readahead=16 127.0.0.1:/main '/Users/me/My Mounts/main'"},
	}
	for _, tt := range tests {
		code, out, _ := runCLI(t, "mount", tt.name, tt.dir, "--print", "--os", tt.os, "--store", store)
		if code != 0 || strings.TrimSpace(out) != tt.want {
			t.Errorf("mount %s %s --os %s: exit %d\n got %s\nwant %s", tt.name, tt.dir, tt.os, code, out, tt.want)
		}
	}
	if code, _, stderr := runCLI(t, "mount", "nosuch", "/mnt/x", "--print", "--store", store); code != exitNotFound {
		t.Errorf("missing branch: exit %d %s", code, stderr)
	}
	if code, _, _ := runCLI(t, "mount", "a/b", "/mnt/x", "--print", "--store", store); code != exitInvalidName {
		t.Errorf("bad name: exit %d", code)
	}
	// Without a server: the port it last listened on.
	offline := shortTempDir(t)
	if err := writeServeInfo(offline, serveInfo{Listen: "127.0.0.1:34567", Port: 34567}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "mount", "b1", "/mnt/b1", "--print", "--os", "linux", "--store", offline)
	if code != 0 || !strings.Contains(out, "port=34567,mountport=34567") || !strings.Contains(stderr, "no server running") {
		t.Errorf("offline: exit %d %q %q", code, out, stderr)
	}
}

// TestAPIMode drives the branch commands against a server's control API.
func TestAPIMode(t *testing.T) {
	_, store := fakeServer(t, 12049)
	s := []string{"--store", store}
	code, out, _ := runCLI(t, append([]string{"fork", "main", "b1"}, s...)...)
	if code != 0 || out != "/b1\n" {
		t.Fatalf("fork: %d %q", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"fork", "main", "b2", "--json"}, s...)...)
	var fr control.ForkResult
	if code != 0 || json.Unmarshal([]byte(out), &fr) != nil || fr.Export != "/b2" || fr.Parent != "main" {
		t.Fatalf("fork --json: %d %q", code, out)
	}
	if code, _, stderr := runCLI(t, append([]string{"fork", "main", "b1"}, s...)...); code != exitExists || !strings.Contains(stderr, "already exists") {
		t.Fatalf("fork existing: %d %q", code, stderr)
	}
	if code, _, _ := runCLI(t, append([]string{"fork", "nosuch", "x"}, s...)...); code != exitNotFound {
		t.Fatalf("fork of missing parent: %d", code)
	}
	if code, _, _ := runCLI(t, append([]string{"fork", "main", "bad name"}, s...)...); code != exitInvalidName {
		t.Fatalf("bad name: %d", code)
	}
	code, out, _ = runCLI(t, append([]string{"commit", "b1"}, s...)...)
	if code != 0 || !strings.Contains(out, "committed b1 into main") || !strings.Contains(out, "invalidated: b2") {
		t.Fatalf("commit: %d %q", code, out)
	}
	code, _, stderr := runCLI(t, append([]string{"commit", "b2"}, s...)...)
	if code != exitInvalidated || !strings.Contains(stderr, "invalidated by the commit of b1 into main") {
		t.Fatalf("commit of invalidated: %d %q", code, stderr)
	}
	if code, _, _ := runCLI(t, append([]string{"commit", "main"}, s...)...); code != exitReadOnly {
		t.Fatalf("commit main: %d", code)
	}
	code, out, _ = runCLI(t, append([]string{"list", "--json", "--all"}, s...)...)
	var infos []branches.Info
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil || len(infos) != 3 {
		t.Fatalf("list --json --all: %d %q", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"list"}, s...)...)
	if code != 0 || !strings.Contains(out, "└─ b2") || strings.Contains(out, "─ b1 ") || !strings.Contains(out, "invalidated") {
		t.Fatalf("list: %d %q", code, out)
	}
	runCLI(t, append([]string{"fork", "main", "c"}, s...)...)
	code, out, _ = runCLI(t, append([]string{"diff", "c"}, s...)...)
	if code != 0 || !strings.Contains(out, "A  file  5 B  a.txt") || !strings.Contains(out, "1 added, 0 modified, 0 deleted") {
		t.Fatalf("diff: %d %q", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"checkpoint", "c", "cp1", "--json"}, s...)...)
	if code != 0 || !strings.Contains(out, `"label": "cp1"`) {
		t.Fatalf("checkpoint: %d %q", code, out)
	}
	if code, _, _ := runCLI(t, append([]string{"restore", "c", "nosuch"}, s...)...); code != exitNotFound {
		t.Fatalf("restore missing: %d", code)
	}
	if code, out, _ := runCLI(t, append([]string{"fork", "c", "c2", "--checkpoint", "cp1"}, s...)...); code != 0 || out != "/c2\n" {
		t.Fatalf("fork --checkpoint: %d %q", code, out)
	}
	if code, out, _ := runCLI(t, append([]string{"abort", "c2"}, s...)...); code != 0 || out != "aborted c2\n" {
		t.Fatalf("abort: %d %q", code, out)
	}
}

func TestNoStore(t *testing.T) {
	store := shortTempDir(t)
	code, _, stderr := runCLI(t, "list", "--store", store)
	if code != exitNoStore || !strings.Contains(stderr, "branchnfs init") {
		t.Fatalf("list without store: %d %q", code, stderr)
	}
	if _, err := os.Stat(store + "/db"); err == nil {
		t.Fatal("list created a store")
	}
}

func TestPrintTree(t *testing.T) {
	ft := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	infos := []branches.Info{
		{ID: 1, Name: "main", State: branches.StateLive},
		{ID: 2, Name: "a", ParentID: 1, Parent: "main", State: branches.StateLive, Depth: 1, ForkTime: ft, BytesChanged: 2048},
		{ID: 3, Name: "b", ParentID: 1, Parent: "main", State: branches.StateInvalidated, Depth: 1, ForkTime: ft.Add(time.Second), InvalidatedBy: "commit of x into main"},
		{ID: 4, Name: "a1", ParentID: 2, Parent: "a", State: branches.StateLive, Depth: 2, ForkTime: ft.Add(2 * time.Second), Checkpoints: []string{"c1"}},
	}
	var w bytes.Buffer
	printTree(&w, infos, nil)
	want := `BRANCH    STATE        FORKED               CHANGED  NOTE
main      live         -                    0 B
├─ a      live         2026-01-02 03:04:05  2.0 KiB
│  └─ a1  live         2026-01-02 03:04:07  0 B      checkpoints: c1
└─ b      invalidated  2026-01-02 03:04:06  0 B      by commit of x into main
`
	if w.String() != want {
		t.Errorf("got\n%s\nwant\n%s", w.String(), want)
	}
	w.Reset()
	printTree(&w, infos, map[string]int64{"main": 3 << 20, "a": 2048, "a1": 0})
	want = `BRANCH    STATE        FORKED               CHANGED  UNIQUE   NOTE
main      live         -                    0 B      3.0 MiB
├─ a      live         2026-01-02 03:04:05  2.0 KiB  2.0 KiB
│  └─ a1  live         2026-01-02 03:04:07  0 B      0 B      checkpoints: c1
└─ b      invalidated  2026-01-02 03:04:06  0 B      -        by commit of x into main
`
	if w.String() != want {
		t.Errorf("with unique bytes: got\n%s\nwant\n%s", w.String(), want)
	}
}

func TestServeDefaults(t *testing.T) {
	cmd := newServeCommand(&globalOptions{})
	if l := cmd.Flags().Lookup("listen"); l == nil || l.DefValue != "127.0.0.1:12049" {
		t.Fatalf("--listen default = %v", l)
	}
	if l := cmd.Flags().Lookup("allow-remote"); l == nil || l.DefValue != "false" {
		t.Fatalf("--allow-remote default = %v", l)
	}
}

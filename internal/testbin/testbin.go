package testbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// Branchnfs is the import path of the branchnfs command.
const Branchnfs = "github.com/branchnfs/branchnfs/cmd/branchnfs"

// Build builds the main package pkg into dir (created if need be, mode
// 0755 so that other users can run what it holds) as name, with env added
// to the build's environment, and returns the binary's path.
func Build(dir, name, pkg string, env ...string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// MkdirTemp makes 0700 directories: open it to the users the binary
	// runs as.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", pkg, err, b)
	}
	return out, nil
}

// Main is the body of a TestMain that needs the branchnfs binary: it builds
// it into a fresh directory, stores its path in *bin, runs the tests and
// removes the directory. It returns the exit code for os.Exit.
func Main(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "branchnfs-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir, "branchnfs", Branchnfs); err != nil {
		fmt.Fprintln(os.Stderr, "building branchnfs:", err)
		return 1
	}
	return m.Run()
}

// Prerequisite skips the test when ok is false and says how to get what is
// missing; under CI=true, where every prerequisite must be installed, it
// fails the test instead.
func Prerequisite(t testing.TB, ok bool, what, fix string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI must provide it: %s", what, fix)
	}
	t.Skipf("%s (%s to run this test)", what, fix)
}

// NeedRoot is Prerequisite for a test that must run as root (to mount a
// filesystem, or to run processes as other users).
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	Prerequisite(t, os.Geteuid() == 0, "not root: "+why, "run the tests as root")
}

// SharedTempDir makes a temporary directory that other users may enter
// and read (MkdirTemp makes it 0700), for what a test runs as another
// user, and removes it when the test ends.
func SharedTempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// User is a uid with its primary and supplementary groups.
type User struct {
	UID, GID uint32
	Groups   []uint32
}

// Current returns the user running the tests.
func Current() User {
	u := User{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	gs, _ := os.Getgroups()
	for _, g := range gs {
		u.Groups = append(u.Groups, uint32(g))
	}
	return u
}

// Apply makes cmd run as u. That needs root unless u is the current user,
// in which case cmd is left alone.
func (u User) Apply(cmd *exec.Cmd) {
	if uint32(os.Geteuid()) == u.UID && uint32(os.Getegid()) == u.GID {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
}

// SyncBuffer collects a process's output; it is safe for concurrent use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Server is one `branchnfs serve` process.
type Server struct {
	Store string
	Port  int
	Cmd   *exec.Cmd
	Out   *SyncBuffer

	done chan struct{}
	err  error // of Wait, once done is closed
}

// ServerOptions configures StartServer.
type ServerOptions struct {
	// User runs the server; the zero value is root.
	User User
	// Listen is the NFS listen address; "" means 127.0.0.1:0 (a free port).
	Listen string
	// Env is added to the server's environment.
	Env []string
	// Args are more serve flags.
	Args []string
	// Wait is how long the control API may take to answer (default 60 s).
	Wait time.Duration
	// NoFile, if set, is the server's limit on open files (RLIMIT_NOFILE),
	// set by a shell's ulimit before it execs the server.
	NoFile int
}

// StartServer starts `branchnfs serve --store store` and waits until its
// control API answers. The server is killed at the end of the test if it
// still runs, and its output is logged if the test failed.
func StartServer(t testing.TB, bin, store string, o ServerOptions) *Server {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Wait == 0 {
		o.Wait = 60 * time.Second
	}
	args := append([]string{"serve", "--store", store, "--listen", o.Listen}, o.Args...)
	s := &Server{Store: store, Out: &SyncBuffer{}, done: make(chan struct{})}
	if o.NoFile > 0 {
		s.Cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, o.NoFile), bin}, args...)...)
	} else {
		s.Cmd = exec.Command(bin, args...)
	}
	s.Cmd.Env = append(os.Environ(), o.Env...)
	o.User.Apply(s.Cmd)
	s.Cmd.Stdout, s.Cmd.Stderr = s.Out, s.Out
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.Cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.Cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("server output (%s):\n%s", strings.Join(args, " "), s.Out.String())
		}
	})
	deadline := time.Now().Add(o.Wait)
	for {
		select {
		case <-s.done:
			t.Fatalf("branchnfs serve exited: %v\n%s", s.err, s.Out.String())
		default:
		}
		c, st, err := control.Dial(context.Background(), control.SocketPath(store), time.Second)
		if err == nil {
			c.Close()
			s.Port = st.Port
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("branchnfs serve did not answer within %v: %v\n%s", o.Wait, err, s.Out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Done is closed when the server process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is the process's exit error, once Done is closed.
func (s *Server) Err() error { return s.err }

// Alive fails the test if the server process has exited.
func (s *Server) Alive(t testing.TB, when string) {
	t.Helper()
	select {
	case <-s.done:
		t.Fatalf("%s: the server died: %v\n%s", when, s.err, s.Out.String())
	default:
	}
}

// Stop sends SIGTERM and fails the test unless the server exits cleanly.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.Cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	if s.err != nil {
		t.Fatalf("branchnfs serve after SIGTERM: %v\n%s", s.err, s.Out.String())
	}
}

// Kill sends SIGKILL and waits for the process to die.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Run runs bin with args as u and returns its exit code and output. It
// fails the test only if the process cannot run at all.
func Run(t testing.TB, bin string, u User, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	u.Apply(cmd)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	t.Logf("%s %s -> %d %s%s", filepath.Base(bin), strings.Join(args, " "), code, o.String(), e.String())
	return code, o.String(), e.String()
}

// PassesUnprivileged runs fn as a user who is not root: directly when the
// tests do not run as root, otherwise by running the test binary again as
// UnprivilegedUID with -test.run=^test$ (RunTestAs), and checking that
// (sub)test want passed there, neither failed nor skipped. fn is test's own
// body, so the second run calls it directly.
func PassesUnprivileged(t *testing.T, test, want string, fn func(*testing.T)) {
	t.Helper()
	if os.Geteuid() != 0 {
		fn(t)
		return
	}
	out, err := RunTestAs(t, UnprivilegedUID, test)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+want+" ") {
		t.Fatalf("%s as uid %d: %v\n%s", test, UnprivilegedUID, err, out)
	}
	t.Logf("%s passed as uid %d", want, UnprivilegedUID)
}

package kernel

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// nfsServer is the NFSv3 server the guest mounts: normally the real
// branchnfs binary, or for harness development any server given by
// BRANCHNFS_KERNEL_SERVER (a command with {dir} and {port} placeholders,
// exporting BRANCHNFS_KERNEL_EXPORT, "/" by default).
type nfsServer struct {
	t       testing.TB
	bin     string   // branchnfs binary; empty for a custom server
	custom  []string // custom server command template
	export  string   // custom server's export path
	store   string   // branchnfs store directory, or the custom server's directory
	port    int
	logPath string
	cred    *syscall.Credential // the user the server and CLI run as; nil: the test's

	mu     sync.Mutex // protects the following
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// buildBinaries builds branchnfs (unless a custom server is configured) and
// the guest's static mount helper once per test process.
func buildBinaries() (branchnfs, helper string, err error) {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "branchnfs-kernel-bin-")
		if buildErr != nil {
			return
		}
		builds := []struct{ out, pkg string }{
			{"mounthelper", "github.com/branchnfs/branchnfs/tests/kernel/mounthelper"},
		}
		if os.Getenv("BRANCHNFS_KERNEL_SERVER") == "" {
			builds = append(builds, struct{ out, pkg string }{"branchnfs", testbin.Branchnfs})
		}
		for _, b := range builds {
			// Static, for the guest; in a directory the regular user some
			// scenarios run the server as can reach.
			if _, buildErr = testbin.Build(buildDir, b.out, b.pkg, "CGO_ENABLED=0"); buildErr != nil {
				return
			}
		}
	})
	return filepath.Join(buildDir, "branchnfs"), filepath.Join(buildDir, "mounthelper"), buildErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// newServer creates (but does not start) a server with a fresh store.
func newServer(t testing.TB, branchnfsBin string) (*nfsServer, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	s := &nfsServer{t: t, bin: branchnfsBin, store: filepath.Join(dir, "store"), port: port, logPath: filepath.Join(dir, "server.log")}
	if c := os.Getenv("BRANCHNFS_KERNEL_SERVER"); c != "" {
		s.bin = ""
		s.custom = strings.Fields(c)
		s.export = os.Getenv("BRANCHNFS_KERNEL_EXPORT")
		if s.export == "" {
			s.export = "/"
		}
		return s, os.MkdirAll(s.store, 0o755)
	}
	if _, err := s.cli("init"); err != nil {
		return nil, err
	}
	return s, nil
}

// isBranchnfs reports whether the server is the real branchnfs (so branch
// scenarios and the known-failures table apply).
func (s *nfsServer) isBranchnfs() bool { return s.bin != "" }

// exportPath is the MOUNT path of a branch.
func (s *nfsServer) exportPath(branch string) string {
	if !s.isBranchnfs() {
		return s.export
	}
	return "/" + branch
}

// cli runs a branchnfs command against the store.
func (s *nfsServer) cli(args ...string) (string, error) {
	if !s.isBranchnfs() {
		return "", fmt.Errorf("branch command %v needs branchnfs, not a custom server", args)
	}
	full := append([]string{args[0], "--store", s.store}, args[1:]...)
	cmd := exec.Command(s.bin, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	s.t.Logf("branchnfs %s -> %v: %s", strings.Join(full, " "), err, strings.TrimSpace(out.String()))
	if err != nil {
		return out.String(), fmt.Errorf("branchnfs %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// start runs the server and waits until it accepts connections.
func (s *nfsServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("server already running")
	}
	var cmd *exec.Cmd
	if s.isBranchnfs() {
		cmd = exec.Command(s.bin, "serve", "--store", s.store, "--listen", fmt.Sprintf("127.0.0.1:%d", s.port))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	} else {
		args := make([]string, len(s.custom))
		for i, a := range s.custom {
			a = strings.ReplaceAll(a, "{dir}", s.store)
			args[i] = strings.ReplaceAll(a, "{port}", strconv.Itoa(s.port))
		}
		cmd = exec.Command(args[0], args[1:]...)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("server exited at start: %s", s.logTail(10))
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return fmt.Errorf("server not listening on port %d after 30s: %s", s.port, s.logTail(10))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.cmd, s.exited = cmd, exited
	return nil
}

// stop sends SIGTERM and waits for the server to exit (SIGKILL after 20 s).
func (s *nfsServer) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("server did not exit within 20s of SIGTERM; killed: %s", s.logTail(10))
	}
}

// kill stops the server with SIGKILL, as a crash would.
func (s *nfsServer) kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("server not running")
	}
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	<-exited
	return nil
}

func (s *nfsServer) logTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}

// linuxMountOptions returns the -o options of the Linux mount command that
// "branchnfs mount --print --os linux" prints for branch, checking that it
// mounts this server's export of the branch over loopback. A custom server
// gets "" (the guest then uses its default options).
func (s *nfsServer) linuxMountOptions(branch string) (string, error) {
	if !s.isBranchnfs() {
		return "", nil
	}
	out, err := s.cli("mount", "--print", "--os", "linux", branch, "/mnt/"+branch)
	if err != nil {
		return "", err
	}
	var opts, source string
	f := strings.Fields(strings.NewReplacer("'", "", "\"", "").Replace(out))
	for i, w := range f {
		switch {
		case w == "-o" && i+1 < len(f):
			opts = f[i+1]
		case strings.Contains(w, ":/"):
			source = w
		}
	}
	want := fmt.Sprintf("127.0.0.1:/%s", branch)
	if opts == "" || source != want {
		return "", fmt.Errorf("branchnfs mount --print: want a mount command of %s with -o OPTIONS, got %q", want, out)
	}
	for _, o := range []string{"vers=3", fmt.Sprintf("port=%d", s.port), fmt.Sprintf("mountport=%d", s.port)} {
		if !contains(strings.Split(opts, ","), o) {
			return "", fmt.Errorf("branchnfs mount --print: options %q lack %s", opts, o)
		}
	}
	return opts, nil
}

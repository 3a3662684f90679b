package testbin

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// VersitygwVersion is the release of versitygw (an S3 server on a local
// directory) that the object-storage tests start. scripts/test.sh installs
// this version; change both together.
const VersitygwVersion = "v1.8.0"

// VersitygwInstall is how scripts/test.sh installs versitygw, for
// messages.
const VersitygwInstall = "scripts/test.sh installs it (GOBIN=$(go env GOCACHE)/../branchnfs-tools/versitygw-" + VersitygwVersion +
	" go install github.com/versity/versitygw/cmd/versitygw@" + VersitygwVersion + "), or set BRANCHNFS_VERSITYGW to a versitygw binary"

// Versitygw returns the versitygw binary: $BRANCHNFS_VERSITYGW, else where
// scripts/test.sh installs it. It skips the test (fails it under CI=true)
// when there is none.
func Versitygw(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("BRANCHNFS_VERSITYGW"); p != "" {
		_, err := os.Stat(p)
		Prerequisite(t, err == nil, fmt.Sprintf("BRANCHNFS_VERSITYGW=%s: %v", p, err), VersitygwInstall)
		return p
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "..", "branchnfs-tools", "versitygw-"+VersitygwVersion, "versitygw")
	_, err = os.Stat(p)
	Prerequisite(t, err == nil, "versitygw "+VersitygwVersion+" is not installed at "+p, VersitygwInstall)
	return filepath.Clean(p)
}

// S3Server is a versitygw process serving a directory over S3 on a
// loopback port, with one bucket and one set of credentials.
type S3Server struct {
	Endpoint             string // 127.0.0.1:port
	Bucket               string
	AccessKey, SecretKey string
	Out                  *SyncBuffer // the server's output, across restarts

	bin, root string
	user      User
	cmd       *exec.Cmd
	done      chan struct{}
}

// S3User is who runs the S3 server: uid 501 gid 20 when the tests run as
// root (a server is no reason to run as root), else the current user.
func S3User() User {
	if os.Geteuid() == 0 {
		return User{UID: 501, GID: 20, Groups: []uint32{20}}
	}
	return Current()
}

// StartS3 starts versitygw with its posix backend in a fresh directory, as
// S3User, on a free loopback port, with bucket "blobs" created, and stops
// it when the test ends.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	bin := Versitygw(t)
	dir, err := os.MkdirTemp("", "branchnfs-s3-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &S3Server{Bucket: "blobs", AccessKey: "branchnfs-test", SecretKey: "branchnfs-test-secret",
		Out: &SyncBuffer{}, root: filepath.Join(dir, "root"), user: S3User()}
	// The server's user must reach the binary and own the bucket
	// directories.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.bin = filepath.Join(dir, "versitygw")
	if err := os.Link(bin, s.bin); err != nil {
		if err := copyFile(bin, s.bin); err != nil {
			t.Fatalf("copying versitygw: %v", err)
		}
	}
	for _, d := range []string{s.root, filepath.Join(s.root, s.Bucket)} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(d, int(s.user.UID), int(s.user.GID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoint = l.Addr().String()
	l.Close()
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			t.Logf("versitygw output:\n%s", s.Out.String())
		}
	})
	s.Start(t)
	return s
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Start starts the server (again, after Stop) on the same port and
// directory, and waits until it accepts connections.
func (s *S3Server) Start(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		t.Fatal("testbin: the S3 server runs already")
	}
	cmd := exec.Command(s.bin, "--port", s.Endpoint, "--quiet", "posix", s.root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = s.Out, s.Out
	s.user.Apply(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting versitygw: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			s.cmd = nil
			t.Fatalf("versitygw exited: %v\n%s", cmd.ProcessState, s.Out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", s.Endpoint, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw does not accept connections on %s after 30 s: %v\n%s", s.Endpoint, err, s.Out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 5 s) and waits for
// it; the directory stays for Start.
func (s *S3Server) Stop(t testing.TB) {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// BucketDir is the directory that holds the bucket's objects: object
// a/b is the file a/b in it.
func (s *S3Server) BucketDir() string { return filepath.Join(s.root, s.Bucket) }

// Package faults runs the real branchnfs binary as an unprivileged user
// under resource exhaustion (a full disk) and checks that it keeps
// serving, answers with clear errors, and loses no acknowledged byte.
package faults

import (
	"bytes"
	"context"
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
	nfs "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

var binPath string // the branchnfs binary under test

// nfsProc3FSStat is FSSTAT, which go-nfs-client does not name.
const nfsProc3FSStat = 18

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bnfs-faults-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The binary runs as another user: its directory must be reachable.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "branchnfs")
	build := exec.Command("go", "build", "-o", binPath, "github.com/branchnfs/branchnfs/cmd/branchnfs")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building branchnfs:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needRoot skips a test that must mount a filesystem, except under CI,
// which runs as root and must run it.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test must run as root under CI: %s", why)
	}
	t.Skipf("not root: %s; run the tests as root to include it", why)
}

// nobody is the unprivileged user the server runs as.
const nobody = 65534

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// server is one `branchnfs serve` process running as uid.
type server struct {
	port int
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startServer starts `branchnfs serve` on store as uid and waits until
// its control API answers.
func startServer(t *testing.T, store string, uid uint32, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--store", store, "--listen", "127.0.0.1:0"}, extra...)
	s := &server{out: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(binPath, args...)
	s.cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(store))
	if uint32(os.Geteuid()) != uid {
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("server output (%s):\n%s", strings.Join(args, " "), s.out.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.done:
			t.Fatalf("branchnfs serve exited: %v\n%s", s.err, s.out.String())
		default:
		}
		c, st, err := control.Dial(context.Background(), control.SocketPath(store), time.Second)
		if err == nil {
			c.Close()
			s.port = st.Port
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("branchnfs serve did not answer within 60 s: %v\n%s", err, s.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive fails the test if the server process has exited.
func (s *server) alive(t *testing.T, when string) {
	t.Helper()
	select {
	case <-s.done:
		t.Fatalf("%s: the server died: %v\n%s", when, s.err, s.out.String())
	default:
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	if s.err != nil {
		t.Fatalf("branchnfs serve after SIGTERM: %v\n%s", s.err, s.out.String())
	}
}

// conn is an NFS connection with a mounted export.
type conn struct {
	c    *rpc.Client
	auth rpc.Auth
	root []byte
	tg   *nfs.Target
}

// mount connects to the server and mounts export as uid.
func mount(t *testing.T, port int, export string, uid uint32) *conn {
	t.Helper()
	c, err := nfs.DialServiceAtPort("127.0.0.1", port)
	if err != nil {
		t.Fatalf("dial 127.0.0.1:%d: %v", port, err)
	}
	t.Cleanup(c.Close)
	auth := rpc.NewAuthUnix("faults", uid, uid).Auth()
	type mountArgs struct {
		rpc.Header
		Dirpath string
	}
	res, err := c.Call(&mountArgs{rpc.Header{Rpcvers: 2, Prog: nfs.MountProg, Vers: nfs.MountVers,
		Proc: nfs.MountProc3MNT, Cred: auth, Verf: rpc.AuthNull}, export})
	if err != nil {
		t.Fatalf("MNT %s: %v", export, err)
	}
	if stat, err := xdr.ReadUint32(res); err != nil || stat != nfs.MNT3Ok {
		t.Fatalf("MNT %s: status %d, %v", export, stat, err)
	}
	fh, err := xdr.ReadOpaque(res)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := nfs.NewTargetWithClient(c, auth, fh, "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	return &conn{c: c, auth: auth, root: fh, tg: tg}
}

func (c *conn) header(proc uint32) rpc.Header {
	return rpc.Header{Rpcvers: 2, Prog: nfs.Nfs3Prog, Vers: nfs.Nfs3Vers, Proc: proc, Cred: c.auth, Verf: rpc.AuthNull}
}

// write writes data at off of the file fh with a FILE_SYNC WRITE and
// returns the NFS status.
func (c *conn) write(fh []byte, off uint64, data []byte) (uint32, error) {
	type writeArgs struct {
		rpc.Header
		FH       []byte
		Offset   uint64
		Count    uint32
		How      uint32
		Contents []byte
	}
	res, err := c.c.Call(&writeArgs{c.header(nfs.NFSProc3Write), fh, off, uint32(len(data)), 2, data})
	if err != nil {
		return 0, err
	}
	return xdr.ReadUint32(res)
}

// read reads a whole file by handle.
func (c *conn) read(fh []byte) ([]byte, error) {
	type readArgs struct {
		rpc.Header
		FH     []byte
		Offset uint64
		Count  uint32
	}
	type readRes struct {
		Attr  nfs.PostOpAttr
		Count uint32
		EOF   uint32
	}
	var out []byte
	for {
		res, err := c.c.Call(&readArgs{c.header(nfs.NFSProc3Read), fh, uint64(len(out)), 1 << 20})
		if err != nil {
			return nil, err
		}
		stat, err := xdr.ReadUint32(res)
		if err != nil {
			return nil, err
		}
		if err := nfs.NFS3Error(stat); err != nil {
			return nil, err
		}
		var rr readRes
		if err := xdr.Read(res, &rr); err != nil {
			return nil, err
		}
		data, err := xdr.ReadOpaque(res)
		if err != nil {
			return nil, err
		}
		out = append(out, data...)
		if rr.EOF != 0 || len(data) == 0 {
			return out, nil
		}
	}
}

// fsstat is the FSSTAT reply.
type fsstat struct {
	Tbytes, Fbytes, Abytes, Tfiles, Ffiles, Afiles uint64
}

func (c *conn) fsstat() (fsstat, error) {
	type args struct {
		rpc.Header
		FH []byte
	}
	res, err := c.c.Call(&args{c.header(nfsProc3FSStat), c.root})
	if err != nil {
		return fsstat{}, err
	}
	stat, err := xdr.ReadUint32(res)
	if err != nil {
		return fsstat{}, err
	}
	if err := nfs.NFS3Error(stat); err != nil {
		return fsstat{}, err
	}
	var attr nfs.PostOpAttr
	if err := xdr.Read(res, &attr); err != nil {
		return fsstat{}, err
	}
	var fs fsstat
	err = xdr.Read(res, &fs)
	return fs, err
}

// Package faults runs the real branchnfs binary as an unprivileged user
// under resource exhaustion (a full disk; clients that never read their
// replies or never finish a request) and checks that it keeps serving,
// answers with clear errors, and loses no acknowledged byte.
package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
	nfs "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

var binPath string // the branchnfs binary under test

// nfsProc3FSStat is FSSTAT, which go-nfs-client does not name.
const nfsProc3FSStat = 18

func TestMain(m *testing.M) { os.Exit(testbin.Main(m, &binPath)) }

// needRoot skips a test that must mount a filesystem, except under CI,
// which runs as root and must run it.
func needRoot(t *testing.T, why string) { t.Helper(); testbin.NeedRoot(t, why) }

// nobody is the unprivileged user the server runs as.
const nobody = 65534

// unprivilegedStore returns a fresh store path, in a directory owned by
// the user the server will run as: nobody when the tests run as root,
// else the user running them.
func unprivilegedStore(t *testing.T) (store string, uid uint32) {
	t.Helper()
	uid = uint32(os.Geteuid())
	dir, err := os.MkdirTemp("", "bnfs-faults")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if uid == 0 {
		uid = nobody
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "store"), uid
}

// server is one `branchnfs serve` process running as uid.
type server struct {
	*testbin.Server
	port int
	out  *testbin.SyncBuffer
}

// startServer starts `branchnfs serve` on store as uid and waits until
// its control API answers.
func startServer(t *testing.T, store string, uid uint32, extra ...string) *server {
	t.Helper()
	return startServerOpts(t, store, testbin.ServerOptions{User: testbin.User{UID: uid, GID: uid}, Args: extra})
}

// startServerOpts is startServer with every option of the harness.
func startServerOpts(t *testing.T, store string, o testbin.ServerOptions) *server {
	t.Helper()
	o.Env = append(o.Env, "HOME="+filepath.Dir(store))
	s := testbin.StartServer(t, binPath, store, o)
	return &server{Server: s, port: s.Port, out: s.Out}
}

// alive fails the test if the server process has exited.
func (s *server) alive(t *testing.T, when string) { t.Helper(); s.Alive(t, when) }

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t *testing.T) { t.Helper(); s.Stop(t) }

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
	c, err := dialMount(port, export, uid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.c.Close)
	return c
}

// dialMount connects and mounts export as uid; the caller closes c.c.
func dialMount(port int, export string, uid uint32) (*conn, error) {
	c, err := nfs.DialServiceAtPort("127.0.0.1", port)
	if err != nil {
		return nil, fmt.Errorf("dial 127.0.0.1:%d: %v", port, err)
	}
	cn, err := mountOn(c, export, uid)
	if err != nil {
		c.Close()
	}
	return cn, err
}

func mountOn(c *rpc.Client, export string, uid uint32) (*conn, error) {
	auth := rpc.NewAuthUnix("faults", uid, uid).Auth()
	type mountArgs struct {
		rpc.Header
		Dirpath string
	}
	res, err := c.Call(&mountArgs{rpc.Header{Rpcvers: 2, Prog: nfs.MountProg, Vers: nfs.MountVers,
		Proc: nfs.MountProc3MNT, Cred: auth, Verf: rpc.AuthNull}, export})
	if err != nil {
		return nil, fmt.Errorf("MNT %s: %v", export, err)
	}
	if stat, err := xdr.ReadUint32(res); err != nil || stat != nfs.MNT3Ok {
		return nil, fmt.Errorf("MNT %s: status %d, %v", export, stat, err)
	}
	fh, err := xdr.ReadOpaque(res)
	if err != nil {
		return nil, err
	}
	tg, err := nfs.NewTargetWithClient(c, auth, fh, "/", 0)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, auth: auth, root: fh, tg: tg}, nil
}

// tryMount is dialMount that gives up after wait (the server may not
// accept the connection yet); a mount that completes later is closed.
func tryMount(port int, export string, uid uint32, wait time.Duration) (*conn, error) {
	type result struct {
		c   *conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := dialMount(port, export, uid)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-time.After(wait):
		go func() {
			if r := <-ch; r.c != nil {
				r.c.c.Close()
			}
		}()
		return nil, fmt.Errorf("no answer within %v", wait)
	}
}

func (c *conn) header(proc uint32) rpc.Header {
	return rpc.Header{Rpcvers: 2, Prog: nfs.Nfs3Prog, Vers: nfs.Nfs3Vers, Proc: proc, Cred: c.auth, Verf: rpc.AuthNull}
}

// write writes data at off of the file fh with a FILE_SYNC WRITE and
// returns the NFS status.
func (c *conn) write(fh []byte, off uint64, data []byte) (uint32, error) {
	return testbin.WriteFH(c.c, c.auth, fh, off, data, testbin.FileSync)
}

// read reads a whole file by handle.
func (c *conn) read(fh []byte) ([]byte, error) { return testbin.ReadFH(c.c, c.auth, fh) }

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

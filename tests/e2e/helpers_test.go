// Package e2e runs the real branchnfs binary as a separate process on a
// free port and drives it with real NFS clients: go-nfs-client in
// process, and Debian's libnfs-utils (nfs-cp, nfs-cat, nfs-ls) as
// subprocesses.
//
// The server and every CLI command run as a regular user, as users run
// them: when the tests run as root (as in CI), those processes drop to
// uid 501 gid 20 (a macOS user in group staff), and each store directory
// is created for that user; otherwise they run as the user running the
// tests.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/testbin"
	nfs "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

var (
	binPath    string // the branchnfs binary under test
	haveLibnfs bool   // nfs-cp, nfs-cat and nfs-ls are installed
)

func TestMain(m *testing.M) {
	haveLibnfs = true
	for _, tool := range []string{"nfs-cp", "nfs-cat", "nfs-ls"} {
		if _, err := exec.LookPath(tool); err != nil {
			haveLibnfs = false
		}
	}
	os.Exit(testbin.Main(m, &binPath))
}

// needLibnfs skips the calling subtest when libnfs-utils is missing, except
// under CI, where it must be installed (scripts/test.sh does).
func needLibnfs(t *testing.T) {
	t.Helper()
	testbin.Prerequisite(t, haveLibnfs, "libnfs-utils is not installed (nfs-cp missing)", "apt-get install libnfs-utils")
}

// osUser is a uid with its groups.
type osUser struct {
	uid, gid uint32
	groups   []uint32
}

// regularUser is who runs the server and the CLI: uid 501 gid 20 when the
// tests run as root, else the user running them.
var regularUser = func() osUser {
	if os.Geteuid() == 0 {
		return osUser{uid: 501, gid: 20, groups: []uint32{20, 12, 61}}
	}
	u := osUser{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}
	gs, _ := os.Getgroups()
	for _, g := range gs {
		u.groups = append(u.groups, uint32(g))
	}
	return u
}()

// rootUser is uid 0, for what only root may do.
var rootUser = osUser{}

// user is u for the harness.
func (u osUser) user() testbin.User { return testbin.User{UID: u.uid, GID: u.gid, Groups: u.groups} }

// runAs makes cmd run as u. It needs root unless u is the current user.
func runAs(cmd *exec.Cmd, u osUser) { u.user().Apply(cmd) }

// userDir returns a fresh directory owned by u (removed at the end of the
// test). Its path is short enough for a store's control socket.
func userDir(t *testing.T, u osUser) string {
	t.Helper()
	d, err := os.MkdirTemp("", "bnfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chown(d, int(u.uid), int(u.gid)); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	return d
}

// chownTree gives every file under root to u, keeping setuid and setgid
// bits (which chown clears).
func chownTree(t *testing.T, root string, u osUser) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, int(u.uid), int(u.gid)); err != nil {
			return err
		}
		if m := fi.Mode(); m&(os.ModeSetuid|os.ModeSetgid) != 0 && m&os.ModeSymlink == 0 {
			return os.Chmod(p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// storeOwners maps a store path to the user its processes run as.
var storeOwners sync.Map

func storeOwner(store string) osUser {
	if u, ok := storeOwners.Load(store); ok {
		return u.(osUser)
	}
	return regularUser
}

// newStore returns a fresh store path, in a directory owned by the
// regular user, with a path short enough for the control socket. The
// server and CLI commands on it run as that user.
func newStore(t *testing.T) string {
	t.Helper()
	return newStoreAs(t, regularUser)
}

// newStoreAs is newStore for a store whose processes run as u.
func newStoreAs(t *testing.T, u osUser) string {
	t.Helper()
	store := filepath.Join(userDir(t, u), "store")
	storeOwners.Store(store, u)
	return store
}

// server is one `branchnfs serve` process.
type server struct {
	*testbin.Server
	store string
	port  int
	out   *testbin.SyncBuffer
	cmd   *exec.Cmd
	done  <-chan struct{} // closed when the process has exited
}

// startServer starts `branchnfs serve` on store, as the store's owner, and
// waits until its control API answers. port 0 picks a free port.
func startServer(t *testing.T, store string, port int, extra ...string) *server {
	t.Helper()
	s := testbin.StartServer(t, binPath, store, testbin.ServerOptions{
		User: storeOwner(store).user(), Listen: fmt.Sprintf("127.0.0.1:%d", port), Args: extra})
	if port != 0 && s.Port != port {
		t.Fatalf("server listens on %d, want %d", s.Port, port)
	}
	return &server{Server: s, store: store, port: s.Port, out: s.Out, cmd: s.Cmd, done: s.Done()}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t *testing.T) { t.Helper(); s.Stop(t) }

// kill sends SIGKILL and waits for the process to die.
func (s *server) kill(t *testing.T) { t.Helper(); s.Kill(t) }

// cli runs the branchnfs binary with --store, as the store's owner.
func cli(t *testing.T, store string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return testbin.Run(t, binPath, storeOwner(store).user(), append(args, "--store", store)...)
}

// mustCLI runs the binary and fails the test unless it exits 0.
func mustCLI(t *testing.T, store string, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, store, args...)
	if code != 0 {
		t.Fatalf("branchnfs %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// listBranches returns `branchnfs list --json --all` by name.
func listBranches(t *testing.T, store string) map[string]branches.Info {
	t.Helper()
	out := mustCLI(t, store, "list", "--json", "--all")
	var infos []branches.Info
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	m := map[string]branches.Info{}
	for _, in := range infos {
		m[in.Name] = in
	}
	return m
}

// NFS client helpers (go-nfs-client).

var auth = rpc.NewAuthUnix("e2e", 0, 0).Auth()

// conn is one TCP connection to the server, shared by the mounts made on
// it. go-nfs-client reconnects by itself when the server restarts.
type conn struct {
	c *rpc.Client
}

func dial(t *testing.T, port int) *conn {
	t.Helper()
	c, err := nfs.DialServiceAtPort("127.0.0.1", port)
	if err != nil {
		t.Fatalf("dial 127.0.0.1:%d: %v", port, err)
	}
	t.Cleanup(c.Close)
	return &conn{c: c}
}

// mntError is a MOUNT status other than MNT3_OK.
type mntError uint32

func (e mntError) Error() string { return fmt.Sprintf("MNT3 status %d", uint32(e)) }

// mnt sends MOUNT MNT for export and returns the root handle.
func (c *conn) mnt(export string) ([]byte, error) {
	type mountArgs struct {
		rpc.Header
		Dirpath string
	}
	res, err := c.c.Call(&mountArgs{rpc.Header{Rpcvers: 2, Prog: nfs.MountProg, Vers: nfs.MountVers,
		Proc: nfs.MountProc3MNT, Cred: auth, Verf: rpc.AuthNull}, export})
	if err != nil {
		return nil, err
	}
	stat, err := xdr.ReadUint32(res)
	if err != nil {
		return nil, err
	}
	if stat != nfs.MNT3Ok {
		return nil, mntError(stat)
	}
	return xdr.ReadOpaque(res)
}

// target returns a go-nfs-client target rooted at handle fh.
func (c *conn) target(t *testing.T, fh []byte) *nfs.Target {
	t.Helper()
	tg, err := nfs.NewTargetWithClient(c.c, auth, fh, "/", 0)
	if err != nil {
		t.Fatalf("target: %v", err)
	}
	return tg
}

// mount mounts export and returns its target and root handle.
func (c *conn) mount(t *testing.T, export string) (*nfs.Target, []byte) {
	t.Helper()
	fh, err := c.mnt(export)
	if err != nil {
		t.Fatalf("MNT %s: %v", export, err)
	}
	return c.target(t, fh), fh
}

// nfsStatus extracts the NFS3 status of a go-nfs-client error.
func nfsStatus(err error) uint32 {
	var ne *nfs.Error
	switch {
	case err == nil:
		return nfs.NFS3Ok
	case errors.As(err, &ne):
		return ne.ErrorNum
	case errors.Is(err, os.ErrNotExist):
		return nfs.NFS3ErrNoEnt
	case errors.Is(err, os.ErrExist):
		return nfs.NFS3ErrExist
	case errors.Is(err, os.ErrPermission):
		return nfs.NFS3ErrPerm
	}
	return 1 << 31 // not an NFS status
}

func wantStatus(t *testing.T, what string, err error, want uint32) {
	t.Helper()
	if got := nfsStatus(err); got != want {
		t.Fatalf("%s: got %v (status %d), want NFS3 status %d", what, err, got, want)
	}
}

// writeFile creates (or opens) path and writes data with FILE_SYNC writes;
// when it returns, the server has acknowledged the data.
func writeFile(t *testing.T, tg *nfs.Target, path string, data []byte) []byte {
	t.Helper()
	f, err := tg.OpenFile(path, 0o644)
	if err != nil {
		t.Fatalf("open %s for writing: %v", path, err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("commit %s: %v", path, err)
	}
	_, fh, err := tg.Lookup(path)
	if err != nil {
		t.Fatalf("lookup %s: %v", path, err)
	}
	return fh
}

func readFile(tg *nfs.Target, path string) ([]byte, error) {
	f, err := tg.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func mustRead(t *testing.T, tg *nfs.Target, path string) []byte {
	t.Helper()
	b, err := readFile(tg, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// readFH reads a whole file by handle with raw READ calls.
func (c *conn) readFH(fh []byte) ([]byte, error) { return testbin.ReadFH(c.c, auth, fh) }

// writeFH writes data at offset 0 of a file by handle (FILE_SYNC).
func (c *conn) writeFH(fh, data []byte) error {
	stat, err := testbin.WriteFH(c.c, auth, fh, 0, data, testbin.FileSync)
	if err != nil {
		return err
	}
	return nfs.NFS3Error(stat)
}

// getattr returns the attributes of a handle.
func (c *conn) getattr(tg *nfs.Target, fh []byte) (*nfs.Fattr, error) { return tg.GetAttr(fh) }

// libnfs helpers.

func nfsURL(port int, path string) string {
	return fmt.Sprintf("nfs://127.0.0.1%s?nfsport=%d&mountport=%d&version=3&auto-traverse-mounts=0&autoreconnect=0", path, port, port)
}

// libnfs runs one of nfs-cp, nfs-cat, nfs-ls.
func libnfs(t *testing.T, tool string, args ...string) (out string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(e.String()))
	}
	return o.String(), err
}

func mustLibnfs(t *testing.T, tool string, args ...string) string {
	t.Helper()
	out, err := libnfs(t, tool, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sortStrings(s []string) { sort.Strings(s) }

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Store directory layout:
//
//	STORE/db/            the Badger database (unless backend.json names etcd)
//	STORE/backend.json   where metadata and blocks live when not in STORE/db (backend.go)
//	STORE/blocks-cache/  the disk cache of S3 blocks (default place)
//	STORE/control.sock   the control API socket of the running server
//	STORE/control.token  the control API's token (mode 0600, kept across restarts)
//	STORE/lock           flock'ed by the process that owns the store
//	STORE/serve.json     the address the server listens on (kept after it stops)
const (
	dbDirName     = "db"
	lockFileName  = "lock"
	serveFileName = "serve.json"
)

var (
	errNoStore     = errors.New("no store")
	errStoreBusy   = errors.New("store busy")
	errStoreExists = errors.New("store already exists")
	errMountFailed = errors.New("mount failed")
)

// dialTimeout bounds how long a command waits for a running server to
// answer on the control socket before opening the store itself.
const dialTimeout = 3 * time.Second

// globalOptions are the flags every command takes.
type globalOptions struct {
	Store string

	stdout, stderr io.Writer
}

func (o *globalOptions) AddFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&o.Store, "store", "",
		"store directory (default $BRANCHNFS_STORE, else "+defaultStoreHint+")")
}

// storeDir returns the absolute store directory, refused (checkStorePath)
// when another user could change it.
func (o *globalOptions) storeDir() (string, error) {
	dir, err := o.storePath()
	if err != nil {
		return "", err
	}
	if err := checkStorePath(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// storePath returns the absolute store directory, unchecked.
func (o *globalOptions) storePath() (string, error) {
	dir := o.Store
	if dir == "" {
		dir = os.Getenv("BRANCHNFS_STORE")
	}
	if dir == "" {
		d, err := defaultStoreDir()
		if err != nil {
			return "", fmt.Errorf("cannot find a default store directory (%v); use --store or $BRANCHNFS_STORE", err)
		}
		dir = d
	}
	return filepath.Abs(dir)
}

// errUnsafeStore is matched by the error of a store directory that another
// user could change.
var errUnsafeStore = errors.New("unsafe store directory")

// unsafeStoreError is checkStorePath's error: what is wrong, and the fix.
type unsafeStoreError struct {
	Dir     string // the store
	Problem string // e.g. "/s is writable by other users (mode 0777), who could ..."
	Fix     string // what to do about it
}

func (e *unsafeStoreError) Error() string {
	return fmt.Sprintf("%v %s: %s; %s", errUnsafeStore, e.Dir, e.Problem, e.Fix)
}

func (e *unsafeStoreError) Unwrap() error { return errUnsafeStore }

// checkStorePath refuses a store directory that another user could change,
// as ssh refuses such a ~/.ssh: whoever may rename entries in the store or
// in a directory above it can put their own control.sock (and receive the
// API token) or db/ in place of the store's. The store directory (if it
// exists) and every directory above it must be owned by the user or root
// and not writable by group or others; above the store, a directory with
// the sticky bit (/tmp) is fine, since others cannot rename what they do
// not own there. A symbolic link on the way must be owned by the user or
// root, and the directories it leads to are checked too. When run as
// root, directories of other users are accepted (root administers them);
// the mode checks still apply.
func checkStorePath(dir string) error {
	uid := uint32(os.Geteuid())
	fix := "move the store (--store or $BRANCHNFS_STORE) to a directory that only you and root can change"
	// The deepest existing directory: a store that does not exist yet is
	// created there, with mode 0700.
	existing := dir
	for {
		if _, err := os.Lstat(existing); err == nil || filepath.Dir(existing) == existing {
			break
		}
		existing = filepath.Dir(existing)
	}
	// Symbolic links on the way: their owner can point them elsewhere.
	for p := existing; ; p = filepath.Dir(p) {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if o := fileOwner(fi); o != uid && o != 0 {
				return &unsafeStoreError{dir, fmt.Sprintf("the symbolic link %s on its path is owned by uid %d, who can point it elsewhere", p, o), fix}
			}
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return fmt.Errorf("store %s: %w", dir, err)
	}
	for p := real; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("store %s: %w", dir, err)
		}
		store := p == real && existing == dir
		what := p
		if !store {
			what = p + ", above the store,"
		}
		if o := fileOwner(fi); o != uid && o != 0 && uid != 0 {
			howto := fix
			if store {
				howto = fmt.Sprintf("run `chown %d %s` as root, or %s", uid, p, fix)
			}
			return &unsafeStoreError{dir, fmt.Sprintf("%s is owned by uid %d, who could replace the store's control.sock or db/", what, o), howto}
		}
		if perm := fi.Mode().Perm(); perm&0o022 != 0 && (store || fi.Mode()&os.ModeSticky == 0) {
			return &unsafeStoreError{dir, fmt.Sprintf("%s is writable by other users (mode %04o), who could replace the store's control.sock or db/", what, perm), fmt.Sprintf("run `chmod go-w %s`, or %s", p, fix)}
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// fileOwner is the uid that owns fi.
func fileOwner(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 0
}

func storeExists(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, dbDirName))
	if err == nil && fi.IsDir() {
		return true
	}
	_, err = os.Stat(filepath.Join(dir, backendFileName)) // metadata on etcd
	return err == nil
}

// storeLock is an exclusive flock on STORE/lock: one process owns a store.
type storeLock struct{ f *os.File }

func lockStore(dir string) (*storeLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(f.Name())
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b))
			if holder != "" {
				holder = " (pid " + holder + ")"
			}
			return nil, fmt.Errorf("%w: store %s is in use by another branchnfs process%s that does not answer on %s",
				errStoreBusy, dir, holder, control.SocketPath(dir))
		}
		return nil, fmt.Errorf("lock store %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &storeLock{f: f}, nil
}

func (l *storeLock) unlock() {
	l.f.Truncate(0)
	unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
}

// openedStore is a store this process opened itself.
type openedStore struct {
	dir     string
	kv      kv.Store
	blocks  blobs.Store // nil: content in kv
	backend *backendConfig
	mgr     *branches.Manager
	lock    *storeLock
	coord   *etcdkv.Coord       // nil unless on etcd metadata
	leases  *etcdkv.ServerLease // on coord: the block writers' and sweeps' lease
}

type openOptions struct {
	create     bool // create the store if missing
	syncWrites bool
	reserve    int64 // free space kept on the store's disk; 0 default, <0 none
	logger     *slog.Logger
	ignore     []string       // non-nil: replaces the store's ignore list
	backend    *backendConfig // from --meta and --blocks; nil: as recorded (backend.go)
	serve      bool           // a server: on etcd, follow the other servers' changes
	leaseTTL   time.Duration  // on etcd, of the branch ownership lease (0: default)
}

// openStore opens (or creates) the store in dir directly. The caller must
// Close it.
func openStore(ctx context.Context, dir string, oo openOptions) (*openedStore, error) {
	exists := storeExists(dir)
	if !exists {
		if !oo.create {
			return nil, fmt.Errorf("%w at %s: run `branchnfs init` or `branchnfs serve` first", errNoStore, dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create store: %w", err)
		}
	}
	lk, err := lockStore(dir)
	if err != nil {
		return nil, err
	}
	logger := oo.logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	be, record, err := resolveBackend(dir, exists, oo.backend)
	if err != nil {
		lk.unlock()
		return nil, err
	}
	st, err := openMeta(dir, be, oo, logger)
	if err != nil {
		lk.unlock()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	blocks, err := openBlocks(ctx, dir, be, logger)
	if err != nil {
		st.Close()
		lk.unlock()
		return nil, err
	}
	if record {
		// Only once both answered: a store that never opened is not
		// recorded as existing.
		if err := writeBackend(dir, be); err != nil {
			closeBlocks(blocks)
			st.Close()
			lk.unlock()
			return nil, err
		}
	}
	statDir := filepath.Join(dir, dbDirName)
	if be.Meta != "" {
		statDir = dir
	}
	var coord *etcdkv.Coord
	if be.Meta != "" {
		// Other servers may share the store: own branches through a
		// lease, learn of their changes (serve), and order block writes
		// and sweeps with theirs.
		if coord, err = etcdkv.OpenCoordURL(be.Meta, etcdkv.Options{Logger: logger}); err != nil {
			closeBlocks(blocks)
			st.Close()
			lk.unlock()
			return nil, fmt.Errorf("open store %s: %w", dir, err)
		}
	}
	// A new store's main belongs to whoever creates it, so that user can
	// write in it through NFS (an import from a directory then gives the
	// root that directory's owner).
	bo := branches.Options{
		Store:   st,
		Ignore:  oo.ignore,
		RootUID: uint32(os.Geteuid()), RootGID: uint32(os.Getegid()),
		Logger: logger,
		FS:     cowfs.Options{Logger: logger, StatDir: statDir, Blobs: blocks},
	}
	if coord != nil {
		if oo.serve {
			bo.Coord = coord
		}
		bo.Leases, bo.LeaseTTL = etcdLeases{coord}, oo.leaseTTL
		// Stable across restarts, so a server takes back what it owned.
		host, _ := os.Hostname()
		bo.Server = host + ":" + dir
	}
	var leases *etcdkv.ServerLease
	if coord != nil && blocks != nil {
		// Blocks in etcd itself keep the one-server sweep: the
		// handshake's writes would not fit etcd's limits in every batch.
		leases = coord.ServerLease(0)
		bo.FS.Leases = leases
	}
	mgr, err := branches.Open(ctx, bo)
	if err != nil {
		if coord != nil {
			coord.Close()
		}
		closeBlocks(blocks)
		st.Close()
		lk.unlock()
		return nil, openBranchesError(dir, err)
	}
	return &openedStore{dir: dir, kv: st, blocks: blocks, backend: be, mgr: mgr, lock: lk, coord: coord, leases: leases}, nil
}

// closeBlocks closes b unless it is nil.
func closeBlocks(b blobs.Store) error {
	if b == nil {
		return nil
	}
	return b.Close()
}

// parseSize parses a byte count such as 536870912, 512M, 512MiB or 1G
// (binary units).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		case 'T', 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size: want bytes, or a number with K, M, G or T (binary units)", s)
	}
	return n * mult, nil
}

// readOnlyWarning says so when the store was opened read-only because its
// disk was full.
func (s *openedStore) readOnlyWarning() string {
	r, ok := s.kv.(kv.SpaceReporter)
	if !ok {
		return ""
	}
	sp, err := r.Space()
	if err != nil || !sp.ReadOnly {
		return ""
	}
	return fmt.Sprintf("branchnfs: WARNING: the disk of %s has less than half of the %s the store keeps free: serving read-only; free space on it and restart the server to write again",
		s.dir, kv.FormatBytes(sp.Reserve))
}

// Close syncs and closes the branches, the store and the lock.
func (s *openedStore) Close() error {
	err := s.mgr.Sync(context.Background())
	if cerr := s.mgr.Close(); err == nil {
		err = cerr
	}
	if s.coord != nil {
		s.coord.Close()
	}
	if cerr := s.kv.Close(); err == nil && !errors.Is(cerr, kv.ErrClosed) {
		err = cerr
	}
	if cerr := closeBlocks(s.blocks); err == nil {
		err = cerr
	}
	s.lock.unlock()
	return err
}

// backend is what branch commands run against: the running server's API,
// or the store opened directly.
type backend struct {
	control.Backend
	client *control.Client // nil in direct mode
	status control.Status  // of the server, when client != nil
	store  *openedStore    // nil in API mode
}

func (b *backend) Close() error {
	if b.client != nil {
		b.client.Close()
		return nil
	}
	return b.store.Close()
}

// openBackend reaches the running server's API if one answers on the
// store's socket, else opens the store directly.
func (o *globalOptions) openBackend(ctx context.Context) (*backend, error) {
	dir, err := o.storeDir()
	if err != nil {
		return nil, err
	}
	if addr := os.Getenv("BRANCHNFS_CONTROL"); addr != "" {
		// A forwarded API (tcp://HOST:PORT), e.g. from inside a VM: no
		// store to fall back on here.
		c, st, err := control.Dial(ctx, addr, dialTimeout)
		if err != nil {
			return nil, fmt.Errorf("$BRANCHNFS_CONTROL=%s: %w", addr, err)
		}
		return &backend{Backend: c, client: c, status: st}, nil
	}
	if c, st, err := control.Dial(ctx, control.SocketPath(dir), dialTimeout); err == nil {
		return &backend{Backend: c, client: c, status: st}, nil
	} else if !errors.Is(err, control.ErrNoServer) {
		return nil, err
	}
	s, err := openStore(ctx, dir, openOptions{})
	if err != nil {
		return nil, err
	}
	return &backend{Backend: s.mgr, store: s}, nil
}

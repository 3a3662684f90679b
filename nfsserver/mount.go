package nfsserver

import (
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// mountProcs is the MOUNT v3 dispatch table (RFC 1813 appendix I).
var mountProcs = [numMountProcs]procInfo{
	{"NULL", nfsNull},
	{"MNT", mountMnt},
	{"DUMP", mountDump},
	{"UMNT", mountUmnt},
	{"UMNTALL", mountUmntall},
	{"EXPORT", mountExport},
}

const (
	numMountProcs = 6
	maxMountPath  = 1024 // MNTPATHLEN
	// maxMounts caps the mount table: clients that never send UMNT (or a
	// client mounting in a loop) cannot grow it without bound. Beyond it
	// the oldest entry is dropped.
	maxMounts = 1024
)

// mountTable remembers who mounted what, for DUMP and for BranchUsers. It
// is advisory, as in every NFS server: UMNT may never come. The mounts of
// a branch that ended (committed, aborted, invalidated) go with it: each
// time the table has doubled since the last look, add drops them, so
// a client that mounts branch after branch and never unmounts (nfs-cp)
// leaves no record per branch.
type mountTable struct {
	// Lock order: mu, then the Branches' own locks (add calls ended).
	mu      sync.Mutex               // protects the following
	m       map[[2]string]mountEntry // by (client name, path)
	seq     uint64                   // of the latest MNT
	pruneAt int                      // size at which add next drops ended branches' mounts
}

type mountEntry struct {
	seq    uint64            // order of the MNT: the lowest is dropped first
	branch string            // the branch of the path; "" for "/"
	id     branches.BranchID // the branch's id; 0 for "/"
}

// minPrune is the size below which the per-branch records (mountTable,
// conn.used) are not searched for ended branches.
const minPrune = 16

func (t *mountTable) init() { t.m = make(map[[2]string]mountEntry) }

// add records a mount of branch id, dropping the oldest entry when the
// table is full. It returns the dropped key, if any. ended tells the
// branches that ended.
func (t *mountTable) add(client, path, branch string, id branches.BranchID, ended func(branches.BranchID) bool) (dropped [2]string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) >= t.pruneAt {
		for k, e := range t.m {
			if e.id != 0 && ended(e.id) {
				delete(t.m, k)
			}
		}
		t.pruneAt = max(2*len(t.m), minPrune)
	}
	t.seq++
	t.m[[2]string{client, path}] = mountEntry{seq: t.seq, branch: branch, id: id}
	if len(t.m) <= maxMounts {
		return dropped, false
	}
	oldest := t.seq
	for k, e := range t.m {
		if e.seq <= oldest {
			oldest, dropped = e.seq, k
		}
	}
	delete(t.m, dropped)
	return dropped, true
}

// clients lists "CLIENT:PATH" for every mount of branch, sorted: of the
// branch of that name with id id, unless id is 0.
func (t *mountTable) clients(branch string, id branches.BranchID) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k, e := range t.m {
		if e.branch == branch && (id == 0 || e.id == id) {
			out = append(out, k[0]+":"+k[1])
		}
	}
	slices.Sort(out)
	return out
}

// clientName identifies the caller in the mount table: the AUTH_UNIX
// machine name, else the remote address.
func (r *request) clientName() string {
	if r.cred.machine != "" {
		return r.cred.machine
	}
	host, _, err := net.SplitHostPort(r.remote)
	if err != nil {
		return r.remote
	}
	return host
}

// mountPoint resolves an export path: "/" is the synthetic root listing
// every live branch; "/B" is branch B's root; "/B/sub/dir" a directory in
// it.
func (r *request) mountPoint(p string) (*node, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return r.s.rootNode(r.ctx)
	}
	parts := strings.Split(p[1:], "/")
	fs, info, err := r.s.opts.Branches.View(parts[0])
	if err != nil {
		return nil, err
	}
	a, err := fs.GetAttr(cowfs.RootIno)
	if err != nil {
		return nil, err
	}
	n := &node{h: fileHandle{branch: info.ID, ino: a.Ino, gen: a.Gen}, fs: fs, info: info, attr: a}
	for _, name := range parts[1:] {
		if n, err = r.lookup(n, name); err != nil {
			return nil, err
		}
	}
	if !n.isDir() {
		return nil, syscall.ENOTDIR
	}
	return n, nil
}

func mountMnt(r *request, d *decoder, e *encoder) error {
	p := d.string(maxMountPath)
	if d.err != nil {
		return errGarbage
	}
	n, err := r.mountPoint(p)
	if err != nil {
		r.s.log.Info("mount: refused", "path", p, "client", r.clientName(), "reason", err)
		e.u32(mountStatus(err))
		return nil
	}
	branch, id := "", branches.BranchID(0)
	if !n.isSyntheticRoot() {
		branch, id = n.info.Name, n.info.ID
	}
	if k, ok := r.s.mounts.add(r.clientName(), p, branch, id, r.s.branchEnded); ok {
		r.s.log.Info("mount: table full; forgetting the oldest mount", "client", k[0], "path", k[1], "max", maxMounts)
	}
	r.s.log.Info("mount: granted", "path", p, "client", r.clientName(), "branch", n.info.Name)
	e.u32(0)
	e.opaque(r.s.encodeHandle(n.h))
	// Offer AUTH_SYS first: macOS uses no credentials at all if only
	// AUTH_NULL is offered.
	e.u32(2)
	e.u32(authUnix)
	e.u32(authNull)
	return nil
}

func mountDump(r *request, d *decoder, e *encoder) error {
	r.s.mounts.mu.Lock()
	list := make([][2]string, 0, len(r.s.mounts.m))
	for k := range r.s.mounts.m {
		list = append(list, k)
	}
	r.s.mounts.mu.Unlock()
	slices.SortFunc(list, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	for _, m := range list {
		e.bool(true)
		e.string(m[0])
		e.string(m[1])
	}
	e.bool(false)
	return nil
}

func mountUmnt(r *request, d *decoder, e *encoder) error {
	p := d.string(maxMountPath)
	if d.err != nil {
		return errGarbage
	}
	r.s.mounts.mu.Lock()
	delete(r.s.mounts.m, [2]string{r.clientName(), p})
	r.s.mounts.mu.Unlock()
	// The client is done with the branch: its recent use of the branch's
	// handles no longer makes the branch in use (BranchUsers).
	if parts := strings.Split(path.Clean("/" + p)[1:], "/"); parts[0] != "" {
		if _, info, err := r.s.opts.Branches.View(parts[0]); err == nil {
			r.s.forgetUse(r.remote, &info.ID)
		}
	}
	return nil
}

func mountUmntall(r *request, d *decoder, e *encoder) error {
	host := r.clientName()
	r.s.mounts.mu.Lock()
	for k := range r.s.mounts.m {
		if k[0] == host {
			delete(r.s.mounts.m, k)
		}
	}
	r.s.mounts.mu.Unlock()
	r.s.forgetUse(r.remote, nil)
	return nil
}

// mountExport lists "/" and every live branch, with no group restriction,
// so clients such as libnfs find the branches without traversing mounts.
func mountExport(r *request, d *decoder, e *encoder) error {
	live, err := r.s.liveBranches(r.ctx)
	if err != nil {
		r.s.log.Warn("mount: cannot list branches for EXPORT", "err", err)
	}
	e.bool(true)
	e.string("/")
	e.bool(false) // no groups
	for _, b := range live {
		e.bool(true)
		e.string("/" + b.Name)
		e.bool(false)
	}
	e.bool(false)
	return nil
}

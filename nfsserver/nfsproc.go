package nfsserver

import (
	"encoding/binary"
	"log/slog"
	"strings"
	"syscall"
	"time"

	nfs "github.com/willscott/go-nfs"

	"github.com/branchnfs/branchnfs/cowfs"
)

// nfsProcs is the NFSv3 dispatch table (RFC 1813), indexed by procedure.
// Every procedure is our own; none goes through go-nfs's server.
var nfsProcs = [numNFSProcs]procInfo{
	{"NULL", nfsNull},
	{"GETATTR", nfsGetattr},
	{"SETATTR", nfsSetattr},
	{"LOOKUP", nfsLookup},
	{"ACCESS", nfsAccess},
	{"READLINK", nfsReadlink},
	{"READ", nfsRead},
	{"WRITE", nfsWrite},
	{"CREATE", nfsCreate},
	{"MKDIR", nfsMkdir},
	{"SYMLINK", nfsSymlink},
	{"MKNOD", nfsMknod},
	{"REMOVE", nfsRemove},
	{"RMDIR", nfsRmdir},
	{"RENAME", nfsRename},
	{"LINK", nfsLink},
	{"READDIR", nfsReaddir},
	{"READDIRPLUS", nfsReaddirplus},
	{"FSSTAT", nfsFsstat},
	{"FSINFO", nfsFsinfo},
	{"PATHCONF", nfsPathconf},
	{"COMMIT", nfsCommit},
}

const numNFSProcs = 22

// Wire limits of RFC 1813.
const (
	fhSize     = 64               // NFS3_FHSIZE
	maxName    = cowfs.MaxNameLen // longest name we store (PATHCONF name_max)
	maxNameXDR = 4096             // longest name we decode (longer is garbage)
	maxPathXDR = 4096             // longest symlink target
)

// stable_how of WRITE.
const (
	unstable = 0
	dataSync = 1
	fileSync = 2
)

// fail answers a failed procedure: the status for err, then words zero
// words (the empty post_op_attr / wcc_data of the procedure's failure
// result). Errors without a specific NFS code are logged.
func (r *request) fail(e *encoder, n *node, err error, words int) error {
	st, known := nfsStatus(err)
	if !known || r.s.log.Enabled(r.ctx, slog.LevelDebug) {
		lvl := slog.LevelDebug
		if !known {
			lvl = slog.LevelWarn
		}
		attrs := []any{"op", r.op(), "status", uint32(st), "err", err, "remote", r.remote}
		if n != nil {
			attrs = append(attrs, "branch", n.info.Name, "ino", uint64(n.attr.Ino))
		}
		r.s.log.Log(r.ctx, lvl, "nfs: request failed", attrs...)
	}
	e.u32(uint32(st))
	for range words {
		e.u32(0)
	}
	return nil
}

func ok(e *encoder) { e.u32(uint32(nfs.NFSStatusOk)) }

// checkName validates a name for LOOKUP or for a new directory entry with
// cowfs's name check, so both layers answer the same errno.
func checkName(name string) error {
	if e := cowfs.CheckName(name); e != 0 {
		return e
	}
	return nil
}

// checkNewName validates the name of an entry to create.
func checkNewName(name string) error {
	if name == "." || name == ".." {
		return syscall.EEXIST
	}
	return checkName(name)
}

// dirForChange resolves a directory whose entries the caller wants to
// change and checks write and search permission on it.
func (r *request) dirForChange(raw []byte) (*node, error) {
	n, err := r.resolve(raw)
	if err != nil {
		return nil, err
	}
	if n.isSyntheticRoot() {
		// Branches are made with fork, not mkdir.
		return n, syscall.EACCES
	}
	if !n.isDir() {
		return n, syscall.ENOTDIR
	}
	if !r.cred.may(&n.attr, mayWrite|mayExec) {
		return n, syscall.EACCES
	}
	return n, nil
}

// postAttr re-reads n's attributes for a post-operation reply; nil if that
// fails.
func postAttr(n *node) *cowfs.Attr {
	if n.isSyntheticRoot() {
		return &n.attr
	}
	a, err := n.fs.GetAttr(n.attr.Ino)
	if err != nil {
		return nil
	}
	return &a
}

func nfsNull(r *request, d *decoder, e *encoder) error { return nil }

func nfsGetattr(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 0)
	}
	ok(e)
	putFattr(e, n.h, &n.attr)
	return nil
}

func nfsSetattr(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	sa := decodeSattr(d)
	guard := d.bool()
	var gsec, gnsec uint32
	if guard {
		gsec, gnsec = d.u32(), d.u32()
	}
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 2)
	}
	pre := n.attr
	if n.isSyntheticRoot() {
		return r.fail(e, n, syscall.EPERM, 2)
	}
	// Refuse at once what the attributes resolved refuse, with no write
	// begun; then check again on the attributes in the transaction that
	// changes them, so that a chown or chmod from elsewhere cannot come
	// between a check and the change it allowed.
	if guard && !sameNFSTime(pre.Ctime, gsec, gnsec) {
		return r.fail(e, n, errNotSync, 2)
	}
	if _, err := r.checkSetattr(n, &sa); err != nil {
		return r.fail(e, n, err, 2)
	}
	if !sa.setsAny() {
		ok(e) // nothing to change, not even the change time
		putWcc(e, n.h, &pre, &pre)
		return nil
	}
	notSync := false
	pre, post, err := n.fs.SetAttrChecked(n.attr.Ino, sa.size != nil, func(cur cowfs.Attr) (cowfs.SetAttr, error) {
		notSync = guard && !sameNFSTime(cur.Ctime, gsec, gnsec)
		if notSync {
			return cowfs.SetAttr{}, syscall.EINVAL // answered as NOT_SYNC below
		}
		at := *n
		at.attr = cur
		return r.checkSetattr(&at, &sa)
	})
	if notSync {
		err = errNotSync
	}
	if err != nil {
		return r.fail(e, n, err, 2)
	}
	ok(e)
	putWcc(e, n.h, &pre, &post)
	return nil
}

// checkSetattr checks the caller's right to make the changes in sa (POSIX
// rules for chmod, chown, truncate and utimes) and returns the change to
// apply, with setuid/setgid bits cleared where POSIX says so.
func (r *request) checkSetattr(n *node, sa *sattr) (cowfs.SetAttr, error) {
	var cs cowfs.SetAttr
	if err := sa.validate(); err != nil {
		return cs, err
	}
	c, a := &r.cred, &n.attr
	owner := c.isRoot() || c.owns(a)
	newGID := a.GID
	if sa.uid != nil {
		if !c.isRoot() && !(c.owns(a) && *sa.uid == a.UID) {
			return cs, syscall.EPERM
		}
		cs.UID = sa.uid
	}
	if sa.gid != nil {
		if !c.isRoot() && !(c.owns(a) && (*sa.gid == a.GID || c.inGroup(*sa.gid))) {
			return cs, syscall.EPERM
		}
		cs.GID = sa.gid
		newGID = *sa.gid
	}
	if sa.mode != nil {
		if !owner {
			return cs, syscall.EPERM
		}
		m := *sa.mode & cowfs.ModePerm
		if !c.isRoot() && m&cowfs.ModeSetgid != 0 && a.Type != cowfs.TypeDir && !c.inGroup(newGID) {
			m &^= cowfs.ModeSetgid
		}
		cs.Mode = &m
	}
	if (sa.uid != nil || sa.gid != nil) && a.Type != cowfs.TypeDir {
		// chown revokes setuid, and setgid on group-executable files.
		m := a.Mode
		if cs.Mode != nil {
			m = *cs.Mode
		}
		nm := m &^ cowfs.ModeSetuid
		if m&0o010 != 0 {
			nm &^= cowfs.ModeSetgid
		}
		if nm != m || cs.Mode != nil {
			cs.Mode = &nm
		}
	}
	if sa.size != nil {
		switch a.Type {
		case cowfs.TypeRegular:
		case cowfs.TypeDir:
			return cs, syscall.EISDIR
		default:
			return cs, syscall.EINVAL
		}
		// The owner may truncate a file it cannot write (an open file
		// whose mode changed), as knfsd allows.
		if !c.owns(a) && !c.may(a, mayWrite) {
			return cs, syscall.EACCES
		}
		if *sa.size > n.maxFileSize() {
			return cs, syscall.EFBIG
		}
		cs.Size = sa.size
		// A truncate by anyone but root revokes setuid, and setgid on
		// group-executable files, with the size change.
		cs.KillSetID = !c.isRoot()
	}
	now := time.Now()
	for _, t := range []struct {
		how uint32
		at  time.Time
		dst **time.Time
	}{{sa.atimeHow, sa.atime, &cs.Atime}, {sa.mtimeHow, sa.mtime, &cs.Mtime}} {
		switch t.how {
		case setToClientTime:
			if !owner {
				return cs, syscall.EPERM
			}
			at := t.at
			*t.dst = &at
		case setToServerTime:
			if !owner && !c.may(a, mayWrite) {
				return cs, syscall.EACCES
			}
			*t.dst = &now
		}
	}
	return cs, nil
}

func sameNFSTime(t time.Time, sec, nsec uint32) bool {
	var e encoder
	putTime(&e, t)
	return binary.BigEndian.Uint32(e.b) == sec && binary.BigEndian.Uint32(e.b[4:]) == nsec
}

func nfsLookup(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	name := d.string(maxNameXDR)
	if d.err != nil {
		return errGarbage
	}
	dir, obj, err := r.lookupHandle(fh, name)
	if dir == nil {
		return r.fail(e, nil, err, 1)
	}
	if err != nil {
		st, _ := nfsStatus(err)
		if st == nfs.NFSStatusNoEnt {
			// Negative lookups are frequent (macOS probes "._name"):
			// answer them with the directory's attributes, quietly.
			e.u32(uint32(st))
			putPostOp(e, dir.h, &dir.attr)
			return nil
		}
		return r.fail(e, dir, err, 1)
	}
	ok(e)
	e.opaque(r.s.encodeHandle(obj.h))
	putPostOp(e, obj.h, &obj.attr)
	putPostOp(e, dir.h, &dir.attr)
	return nil
}

// lookupHandle resolves the directory handle fh and finds name in it. dir
// is nil when the error is about the handle. A name in a branch's
// directory is looked up in the same store transaction that reads the
// directory (cowfs LookupDir); ".", ".." and the synthetic root go through
// resolve and lookup.
func (r *request) lookupHandle(fh []byte, name string) (dir, obj *node, err error) {
	h, err := r.s.decodeHandle(fh)
	if err != nil {
		return nil, nil, err
	}
	if h.isSyntheticRoot() || name == "." || name == ".." {
		if dir, err = r.resolve(fh); err != nil {
			return nil, nil, err
		}
		obj, err = r.lookup(dir, name)
		return dir, obj, err
	}
	fs, info, err := r.handleView(h)
	if err != nil {
		return nil, nil, err
	}
	d, a, lerr := fs.LookupDir(h.ino, name)
	if d.Ino == 0 {
		if lerr == nil {
			lerr = syscall.ESTALE
		}
		return nil, nil, lerr
	}
	if d.Gen != h.gen {
		return nil, nil, syscall.ESTALE
	}
	dir = &node{h: h, fs: fs, info: info, attr: d}
	// The checks lookup makes, in its order, on the directory read with
	// the name: a name is never revealed to a caller without search
	// permission.
	if !dir.isDir() {
		return dir, nil, syscall.ENOTDIR
	}
	if !r.cred.may(&dir.attr, mayExec) {
		return dir, nil, syscall.EACCES
	}
	if err := checkName(name); err != nil {
		return dir, nil, err
	}
	if lerr != nil {
		return dir, nil, lerr
	}
	return dir, dir.nodeOf(a), nil
}

// lookup finds name in directory dir, checking search permission.
func (r *request) lookup(dir *node, name string) (*node, error) {
	if !dir.isDir() {
		return nil, syscall.ENOTDIR
	}
	if !r.cred.may(&dir.attr, mayExec) {
		return nil, syscall.EACCES
	}
	switch name {
	case ".":
		return dir, nil
	case "..":
		return r.parentOf(dir)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if dir.isSyntheticRoot() {
		return r.s.branchRoot(name)
	}
	a, err := dir.fs.Lookup(dir.attr.Ino, name)
	if err != nil {
		return nil, err
	}
	return dir.nodeOf(a), nil
}

func nfsAccess(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	want := d.u32()
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 1)
	}
	got := r.cred.access(&n.attr, want)
	if n.isSyntheticRoot() {
		got &= access3Read | access3Lookup
	}
	ok(e)
	putPostOp(e, n.h, &n.attr)
	e.u32(got)
	return nil
}

func nfsReadlink(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 1)
	}
	if n.attr.Type != cowfs.TypeSymlink {
		return r.fail(e, n, syscall.EINVAL, 1)
	}
	target, err := n.fs.Readlink(n.attr.Ino)
	if err != nil {
		return r.fail(e, n, err, 1)
	}
	ok(e)
	putPostOp(e, n.h, &n.attr)
	e.string(target)
	return nil
}

// nfsRead answers from one store snapshot: the inode's attributes (the
// handle's generation, the permission check, the post-op attributes) and
// the data are read together (cowfs.View.ReadInto), one transaction per
// READ.
func nfsRead(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	off := d.u64()
	count := d.u32()
	if d.err != nil {
		return errGarbage
	}
	h, err := r.s.decodeHandle(fh)
	if err != nil {
		return r.fail(e, nil, err, 1)
	}
	if h.isSyntheticRoot() {
		n, err := r.s.rootNode(r.ctx)
		if err == nil {
			err = syscall.EISDIR
		}
		return r.fail(e, n, err, 1)
	}
	fs, info, err := r.handleView(h)
	if err != nil {
		return r.fail(e, nil, err, 1)
	}
	n := &node{h: h, fs: fs, info: info}
	count = min(count, maxIO) // clamp: never allocate what the client asks
	start := len(e.b)
	var hdr, dataAt int
	got, eof, err := fs.ReadInto(h.ino, off, int(count), func(a *cowfs.Attr, want int) ([]byte, error) {
		if a.Gen != h.gen {
			return nil, syscall.ESTALE
		}
		n.attr = *a
		switch a.Type {
		case cowfs.TypeRegular:
		case cowfs.TypeDir:
			return nil, syscall.EISDIR
		default:
			return nil, syscall.EINVAL
		}
		// Read, or execute (a client loading a 0711 binary), or ownership
		// (an open file whose mode changed) allows READ, as with knfsd.
		c := &r.cred
		if !c.owns(a) && !c.may(a, mayRead) && !c.may(a, mayExec) {
			return nil, syscall.EACCES
		}
		e.b = e.b[:start] // a retried read starts over
		ok(e)
		putPostOp(e, h, a)
		hdr = len(e.b)
		e.u32(0) // count
		e.u32(0) // eof
		e.u32(0) // data length
		dataAt = len(e.b)
		e.b = growBuf(e.b, want)
		return e.b[dataAt:], nil
	})
	if err != nil {
		e.b = e.b[:start]
		if n.attr.Ino == 0 {
			n = nil // the inode was not read
		}
		return r.fail(e, n, err, 1)
	}
	e.b = e.b[:dataAt+got]
	if r := got & 3; r != 0 {
		e.b = append(e.b, zeroPad[:4-r]...)
	}
	binary.BigEndian.PutUint32(e.b[hdr:], uint32(got))
	if eof {
		binary.BigEndian.PutUint32(e.b[hdr+4:], 1)
	}
	binary.BigEndian.PutUint32(e.b[hdr+8:], uint32(got))
	r.s.metrics.bytesRead.Add(uint64(got))
	return nil
}

func nfsWrite(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	off := d.u64()
	count := d.u32()
	stable := d.u32()
	data := d.opaque(maxIO) // a longer length is refused here, unallocated
	if d.err != nil || stable > fileSync {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 2)
	}
	switch n.attr.Type {
	case cowfs.TypeRegular:
	case cowfs.TypeDir:
		return r.fail(e, n, syscall.EISDIR, 2)
	default:
		return r.fail(e, n, syscall.EINVAL, 2)
	}
	c := &r.cred
	if !c.owns(&n.attr) && !c.may(&n.attr, mayWrite) {
		return r.fail(e, n, syscall.EACCES, 2)
	}
	if uint64(count) > uint64(len(data)) {
		return r.fail(e, n, syscall.EINVAL, 2)
	}
	data = data[:count]
	if max := n.maxFileSize(); off > max || uint64(count) > max-off {
		return r.fail(e, n, syscall.EFBIG, 2)
	}
	pre := n.attr
	// A write by anyone but root revokes setuid, and setgid on
	// group-executable files, in the write's own transaction.
	post, err := n.fs.WriteAtOpts(n.attr.Ino, data, int64(off), cowfs.WriteOptions{KillSetID: !c.isRoot()})
	if err != nil {
		return r.fail(e, n, err, 2)
	}
	committed := uint32(unstable)
	if stable != unstable {
		if err := n.fs.Sync(r.ctx); err != nil {
			return r.fail(e, n, err, 2)
		}
		committed = fileSync
	}
	r.s.metrics.bytesWritten.Add(uint64(count))
	ok(e)
	putWcc(e, n.h, &pre, &post)
	e.u32(count)
	e.u32(committed)
	e.fixed(r.s.writeVerf[:])
	return nil
}

// newAttr builds the attributes of a new inode in dir from the caller's
// sattr3: the caller's uid, the group per newGID, the mode asked for (or
// def), setgid dropped where POSIX drops it.
//
// CREATE, MKDIR, SYMLINK and MKNOD from macOS may carry a uid and a gid:
// the client fills in the caller's uid and, as BSD does, the directory's
// gid, and leaves out only what equals the caller's uid and the directory's
// or the caller's gid as it last saw them. A non-root caller may name its
// own uid, and as group one of its groups or the directory's (the group a
// new file gets on BSD); anything else is EPERM, so no file is created
// with owners other than the ones asked for.
func (r *request) newAttr(dir *node, sa *sattr, def uint32, isDir bool) (cowfs.NewAttr, error) {
	if err := sa.validate(); err != nil {
		return cowfs.NewAttr{}, err
	}
	c := &r.cred
	na := cowfs.NewAttr{Mode: def, UID: c.uid, GID: c.newGID(&dir.attr)}
	if sa.mode != nil {
		na.Mode = *sa.mode & cowfs.ModePerm
	}
	if sa.uid != nil && *sa.uid != na.UID {
		if !c.isRoot() {
			return na, syscall.EPERM
		}
		na.UID = *sa.uid
	}
	if sa.gid != nil && *sa.gid != na.GID {
		if !c.mayGiveGID(&dir.attr, *sa.gid) {
			return na, syscall.EPERM
		}
		na.GID = *sa.gid
	}
	if isDir {
		if dir.attr.Mode&cowfs.ModeSetgid != 0 {
			na.Mode |= cowfs.ModeSetgid
		}
	} else if na.Mode&cowfs.ModeSetgid != 0 && !c.isRoot() && !c.inGroup(na.GID) {
		na.Mode &^= cowfs.ModeSetgid
	}
	if sa.atimeHow == setToClientTime {
		na.Atime = sa.atime
	}
	if sa.mtimeHow == setToClientTime {
		na.Mtime = sa.mtime
	}
	return na, nil
}

// putCreated encodes the success result shared by CREATE, MKDIR, SYMLINK
// and MKNOD: post_op_fh3, post_op_attr, dir wcc_data.
func (r *request) putCreated(e *encoder, dir *node, pre cowfs.Attr, obj cowfs.Attr) {
	h := dir.h.child(obj.Ino, obj.Gen)
	ok(e)
	e.bool(true)
	e.opaque(r.s.encodeHandle(h))
	putPostOp(e, h, &obj)
	putWcc(e, dir.h, &pre, postAttr(dir))
}

func nfsCreate(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	name := d.string(maxNameXDR)
	mode := d.u32()
	var sa sattr
	var verf uint64
	switch mode {
	case 0, 1:
		sa = decodeSattr(d)
	case 2:
		verf = d.u64() // createverf3: 8 opaque bytes
	default:
		d.fail()
	}
	if d.err != nil {
		return errGarbage
	}
	dir, err := r.dirForChange(fh)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	if err := checkNewName(name); err != nil {
		return r.fail(e, dir, err, 2)
	}
	na, err := r.newAttr(dir, &sa, 0o644, false)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	how := []cowfs.CreateHow{cowfs.CreateUnchecked, cowfs.CreateGuarded, cowfs.CreateExclusive}[mode]
	if mode == 2 {
		// The client follows up with SETATTR for mode and times.
		na.Mode = 0o600
	}
	pre := dir.attr
	a, err := dir.fs.Create(dir.attr.Ino, name, how, na, verf)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	// UNCHECKED on an existing file leaves it as it is, except that a
	// requested size of 0 truncates it.
	if how == cowfs.CreateUnchecked && sa.size != nil && *sa.size == 0 && a.Size != 0 {
		if !r.cred.owns(&a) && !r.cred.may(&a, mayWrite) {
			return r.fail(e, dir, syscall.EACCES, 2)
		}
		zero := uint64(0)
		if a, err = dir.fs.SetAttr(a.Ino, cowfs.SetAttr{Size: &zero, KillSetID: !r.cred.isRoot()}); err != nil {
			return r.fail(e, dir, err, 2)
		}
	}
	r.putCreated(e, dir, pre, a)
	return nil
}

func nfsMkdir(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	name := d.string(maxNameXDR)
	sa := decodeSattr(d)
	if d.err != nil {
		return errGarbage
	}
	dir, err := r.dirForChange(fh)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	if err := checkNewName(name); err != nil {
		return r.fail(e, dir, err, 2)
	}
	na, err := r.newAttr(dir, &sa, 0o755, true)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	pre := dir.attr
	a, err := dir.fs.Mkdir(dir.attr.Ino, name, na)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	r.putCreated(e, dir, pre, a)
	return nil
}

func nfsSymlink(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	name := d.string(maxNameXDR)
	sa := decodeSattr(d)
	target := d.string(maxPathXDR)
	if d.err != nil {
		return errGarbage
	}
	dir, err := r.dirForChange(fh)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	if err := checkNewName(name); err != nil {
		return r.fail(e, dir, err, 2)
	}
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return r.fail(e, dir, syscall.ENOENT, 2)
	}
	na, err := r.newAttr(dir, &sa, 0o777, false)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	pre := dir.attr
	a, err := dir.fs.Symlink(dir.attr.Ino, name, target, na)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	r.putCreated(e, dir, pre, a)
	return nil
}

func nfsMknod(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	name := d.string(maxNameXDR)
	t := cowfs.FileType(d.u32())
	var sa sattr
	var rdev uint64
	switch t {
	case cowfs.TypeChar, cowfs.TypeBlock:
		sa = decodeSattr(d)
		rdev = uint64(d.u32())<<32 | uint64(d.u32())
	case cowfs.TypeSocket, cowfs.TypeFIFO:
		sa = decodeSattr(d)
	case cowfs.TypeRegular, cowfs.TypeDir, cowfs.TypeSymlink:
	default:
		d.fail()
	}
	if d.err != nil {
		return errGarbage
	}
	dir, err := r.dirForChange(fh)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	switch t {
	case cowfs.TypeRegular, cowfs.TypeDir, cowfs.TypeSymlink:
		return r.fail(e, dir, errBadType, 2)
	case cowfs.TypeChar, cowfs.TypeBlock:
		if !r.cred.isRoot() {
			return r.fail(e, dir, syscall.EPERM, 2)
		}
	}
	if err := checkNewName(name); err != nil {
		return r.fail(e, dir, err, 2)
	}
	na, err := r.newAttr(dir, &sa, 0o644, false)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	na.Rdev = rdev
	pre := dir.attr
	a, err := dir.fs.Mknod(dir.attr.Ino, name, t, na)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	r.putCreated(e, dir, pre, a)
	return nil
}

// victim looks up the entry name of dir that the caller wants to remove or
// rename away, and applies the sticky-directory rule.
func (r *request) victim(dir *node, name string) (cowfs.Attr, error) {
	if err := checkName(name); err != nil {
		return cowfs.Attr{}, err
	}
	a, err := dir.fs.Lookup(dir.attr.Ino, name)
	if err != nil {
		return a, err
	}
	if r.cred.stickyDenies(&dir.attr, &a) {
		return a, syscall.EPERM
	}
	return a, nil
}

func nfsRemove(r *request, d *decoder, e *encoder) error { return remove(r, d, e, false) }
func nfsRmdir(r *request, d *decoder, e *encoder) error  { return remove(r, d, e, true) }

func remove(r *request, d *decoder, e *encoder, isDir bool) error {
	fh := d.opaque(fhSize)
	name := d.string(maxNameXDR)
	if d.err != nil {
		return errGarbage
	}
	dir, err := r.dirForChange(fh)
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	switch {
	case isDir && name == ".":
		return r.fail(e, dir, syscall.EINVAL, 2)
	case isDir && name == "..":
		return r.fail(e, dir, syscall.ENOTEMPTY, 2)
	case name == "." || name == "..":
		return r.fail(e, dir, syscall.EISDIR, 2)
	}
	// The entry is read first only where the sticky-directory rule could
	// deny its removal; elsewhere Unlink and Rmdir find it (or answer
	// ENOENT) in their own transaction.
	if r.cred.stickyApplies(&dir.attr) {
		_, err = r.victim(dir, name)
	} else {
		err = checkName(name)
	}
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	pre := dir.attr
	if isDir {
		err = dir.fs.Rmdir(dir.attr.Ino, name)
	} else {
		err = dir.fs.Unlink(dir.attr.Ino, name)
	}
	if err != nil {
		return r.fail(e, dir, err, 2)
	}
	ok(e)
	putWcc(e, dir.h, &pre, postAttr(dir))
	return nil
}

func nfsRename(r *request, d *decoder, e *encoder) error {
	fromFH := d.opaque(fhSize)
	fromName := d.string(maxNameXDR)
	toFH := d.opaque(fhSize)
	toName := d.string(maxNameXDR)
	if d.err != nil {
		return errGarbage
	}
	from, err := r.dirForChange(fromFH)
	if err != nil {
		return r.fail(e, from, err, 4)
	}
	to, err := r.dirForChange(toFH)
	if err != nil {
		return r.fail(e, to, err, 4)
	}
	if from.h.branch != to.h.branch {
		return r.fail(e, from, syscall.EXDEV, 4)
	}
	for _, name := range []string{fromName, toName} {
		if name == "." || name == ".." {
			return r.fail(e, from, syscall.EINVAL, 4)
		}
	}
	if err := checkName(toName); err != nil {
		return r.fail(e, to, err, 4)
	}
	src, err := r.victim(from, fromName)
	if err != nil {
		return r.fail(e, from, err, 4)
	}
	if dst, err := to.fs.Lookup(to.attr.Ino, toName); err == nil {
		if dst.Ino != src.Ino && r.cred.stickyDenies(&to.attr, &dst) {
			return r.fail(e, to, syscall.EPERM, 4)
		}
	}
	// Moving a directory to another parent rewrites its "..": that needs
	// write permission on the directory itself.
	if src.Type == cowfs.TypeDir && from.attr.Ino != to.attr.Ino && !r.cred.may(&src, mayWrite) {
		return r.fail(e, from, syscall.EACCES, 4)
	}
	preFrom, preTo := from.attr, to.attr
	if err := from.fs.Rename(from.attr.Ino, fromName, to.attr.Ino, toName); err != nil {
		return r.fail(e, from, err, 4)
	}
	ok(e)
	putWcc(e, from.h, &preFrom, postAttr(from))
	putWcc(e, to.h, &preTo, postAttr(to))
	return nil
}

func nfsLink(r *request, d *decoder, e *encoder) error {
	fileFH := d.opaque(fhSize)
	dirFH := d.opaque(fhSize)
	name := d.string(maxNameXDR)
	if d.err != nil {
		return errGarbage
	}
	file, err := r.resolve(fileFH)
	if err != nil {
		return r.fail(e, file, err, 3)
	}
	dir, err := r.dirForChange(dirFH)
	if err != nil {
		return r.fail(e, dir, err, 3)
	}
	if file.isSyntheticRoot() || file.h.branch != dir.h.branch {
		return r.fail(e, dir, syscall.EXDEV, 3)
	}
	if file.isDir() {
		return r.fail(e, file, syscall.EPERM, 3)
	}
	if err := checkNewName(name); err != nil {
		return r.fail(e, dir, err, 3)
	}
	pre := dir.attr
	a, err := dir.fs.Link(file.attr.Ino, dir.attr.Ino, name)
	if err != nil {
		return r.fail(e, dir, err, 3)
	}
	ok(e)
	putPostOp(e, file.h, &a)
	putWcc(e, dir.h, &pre, postAttr(dir))
	return nil
}

func nfsFsstat(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 1)
	}
	fs := n.fs
	if fs == nil { // synthetic root: the figures of the store, via any branch
		if live, err := r.s.liveBranches(r.ctx); err == nil {
			for _, b := range live {
				if f, _, err := r.s.opts.Branches.View(b.Name); err == nil {
					fs = f
					break
				}
			}
		}
	}
	var st cowfs.StatFS
	if fs != nil {
		if st, err = fs.StatFS(); err != nil {
			return r.fail(e, n, err, 1)
		}
	}
	ok(e)
	putPostOp(e, n.h, &n.attr)
	e.u64(st.TotalBytes)
	e.u64(st.FreeBytes)
	e.u64(st.AvailBytes)
	e.u64(st.TotalFiles)
	e.u64(st.FreeFiles)
	e.u64(st.FreeFiles) // afiles
	e.u32(0)            // invarsec: figures change any time
	return nil
}

// FSINFO properties.
const (
	fsfLink        = 0x01
	fsfSymlink     = 0x02
	fsfHomogeneous = 0x08
	fsfCanSetTime  = 0x10
)

func nfsFsinfo(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 1)
	}
	ok(e)
	putPostOp(e, n.h, &n.attr)
	e.u32(maxIO) // rtmax
	e.u32(maxIO) // rtpref
	e.u32(4096)  // rtmult
	e.u32(maxIO) // wtmax
	e.u32(maxIO) // wtpref
	e.u32(4096)  // wtmult
	e.u32(dirPref)
	e.u64(n.maxFileSize())
	e.u32(0) // time_delta: 1 ns
	e.u32(1)
	e.u32(fsfLink | fsfSymlink | fsfHomogeneous | fsfCanSetTime)
	return nil
}

func nfsPathconf(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 1)
	}
	ok(e)
	putPostOp(e, n.h, &n.attr)
	e.u32(65000)   // linkmax
	e.u32(maxName) // name_max
	e.bool(true)   // no_trunc: long names are refused, not truncated
	e.bool(true)   // chown_restricted
	e.bool(false)  // case_insensitive
	e.bool(true)   // case_preserving
	return nil
}

func nfsCommit(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	d.u64() // offset
	d.u32() // count
	if d.err != nil {
		return errGarbage
	}
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 2)
	}
	if !n.isSyntheticRoot() {
		if err := n.fs.Sync(r.ctx); err != nil {
			return r.fail(e, n, err, 2)
		}
	}
	ok(e)
	putWcc(e, n.h, &n.attr, &n.attr)
	e.fixed(r.s.writeVerf[:])
	return nil
}

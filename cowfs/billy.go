package cowfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/helper/chroot"
)

// The go-billy v5 API: paths are slash-separated and relative to the view's
// root; a leading "/" is allowed. Files are cheap handles (an inode number
// and an offset), so opening and closing costs one lookup.

// Billy is the go-billy v5 filesystem of a view (billy.Filesystem,
// billy.Change, symlinks, and Link for hard links). It embeds the view, so
// the inode-level calls stay reachable.
type Billy struct{ *View }

// Billy returns the go-billy filesystem of the view.
func (f *View) Billy() *Billy { return &Billy{f} }

var (
	_ billy.Filesystem = (*Billy)(nil)
	_ billy.Change     = (*Billy)(nil)
	_ billy.File       = (*File)(nil)
)

const maxSymlinkHops = 40

// baseName is the last component of a cleaned path, "/" for the root.
func baseName(p string) string {
	parts, err := splitPath(p)
	if err != nil || len(parts) == 0 {
		return "/"
	}
	return parts[len(parts)-1]
}

// cleanName is p relative to the root, cleaned ("" for the root).
func cleanName(p string) string {
	parts, _ := splitPath(p)
	return strings.Join(parts, "/")
}

// splitPath validates and splits a path into its components.
func splitPath(p string) ([]string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return nil, syscall.EINVAL
	}
	p = strings.TrimPrefix(p, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" || p == "." {
		return nil, nil
	}
	var out []string
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "":
			return nil, syscall.EINVAL
		case c == ".":
		case c == "..":
			if len(out) == 0 {
				return nil, syscall.EINVAL // escapes the root
			}
			out = out[:len(out)-1]
		case len(c) > maxNameLen:
			return nil, syscall.ENAMETOOLONG
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// resolve walks p from the root, following symlinks in every component and,
// when follow is set, in the last one.
func (f *View) resolve(p string, follow bool) (Attr, error) {
	parts, err := splitPath(p)
	if err != nil {
		return Attr{}, err
	}
	return f.walk(RootIno, parts, follow, 0)
}

func (f *View) walk(dir InodeID, parts []string, follow bool, hops int) (Attr, error) {
	cur, err := f.getAttr(dir)
	if err != nil {
		return Attr{}, err
	}
	for i, name := range parts {
		if cur.Type != TypeDir {
			return Attr{}, syscall.ENOTDIR
		}
		next, err := f.lookup(cur.Ino, name)
		if err != nil {
			return Attr{}, err
		}
		last := i == len(parts)-1
		if next.Type == TypeSymlink && (!last || follow) {
			if hops >= maxSymlinkHops {
				return Attr{}, syscall.ELOOP
			}
			target, err := f.readlink(next.Ino)
			if err != nil {
				return Attr{}, err
			}
			base := cur.Ino
			if strings.HasPrefix(target, "/") {
				base = RootIno
			}
			tparts, err := splitPathFrom(f, base, target)
			if err != nil {
				return Attr{}, err
			}
			next, err = f.walk(tparts.dir, append(tparts.parts, parts[i+1:]...), follow, hops+1)
			return next, err
		}
		cur = next
	}
	return cur, nil
}

type relPath struct {
	dir   InodeID
	parts []string
}

// splitPathFrom resolves ".." lexically against the absolute path of base.
func splitPathFrom(f *View, base InodeID, target string) (relPath, error) {
	if strings.HasPrefix(target, "/") {
		parts, err := splitPath(target)
		return relPath{RootIno, parts}, err
	}
	bp, err := f.pathOf(base)
	if err != nil {
		return relPath{}, err
	}
	full := path.Join("/", bp, target)
	parts, err := splitPath(full)
	return relPath{RootIno, parts}, err
}

// parentOf resolves the directory of p and returns it with the last name.
func (f *View) parentOf(p string) (Attr, string, error) {
	parts, err := splitPath(p)
	if err != nil {
		return Attr{}, "", err
	}
	if len(parts) == 0 {
		return Attr{}, "", syscall.EINVAL
	}
	d, err := f.walk(RootIno, parts[:len(parts)-1], true, 0)
	if err != nil {
		return Attr{}, "", err
	}
	if d.Type != TypeDir {
		return Attr{}, "", syscall.ENOTDIR
	}
	return d, parts[len(parts)-1], nil
}

// Create creates or truncates a file, as os.Create.
func (f *Billy) Create(filename string) (billy.File, error) {
	return f.OpenFile(filename, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// Open opens a file for reading.
func (f *Billy) Open(filename string) (billy.File, error) {
	return f.OpenFile(filename, os.O_RDONLY, 0)
}

// OpenFile opens a file with os.OpenFile's flags.
func (f *Billy) OpenFile(filename string, flag int, perm os.FileMode) (billy.File, error) {
	// With O_CREATE|O_EXCL a symlink in the last component is not followed:
	// it exists, so the open fails with EEXIST (POSIX).
	excl := flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0
	a, err := f.resolve(filename, !excl)
	switch {
	case err == nil:
		if flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0 {
			return nil, pathErr("open", filename, syscall.EEXIST)
		}
	case errors.Is(err, syscall.ENOENT) && flag&os.O_CREATE != 0:
		d, name, err := f.parentOf(filename)
		if err != nil {
			return nil, f.wrap("open", filename, err)
		}
		how := CreateUnchecked
		if flag&os.O_EXCL != 0 {
			how = CreateGuarded
		}
		if a, err = f.create(d.Ino, name, how, NewAttr{Mode: modeToPOSIX(perm)}, 0); err != nil {
			return nil, f.wrap("open", filename, err)
		}
	default:
		return nil, f.wrap("open", filename, err)
	}
	if a.Type == TypeDir && flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		return nil, pathErr("open", filename, syscall.EISDIR)
	}
	if flag&os.O_TRUNC != 0 && a.Type == TypeRegular && a.Size > 0 {
		zero := uint64(0)
		if _, err := f.setAttr(a.Ino, SetAttr{Size: &zero}); err != nil {
			return nil, f.wrap("open", filename, err)
		}
	}
	file := &File{fs: f.View, ino: a.Ino, name: cleanName(filename), flag: flag}
	if flag&os.O_APPEND != 0 {
		file.append = true
	}
	return file, nil
}

// Stat returns the FileInfo of filename, following symlinks.
func (f *Billy) Stat(filename string) (os.FileInfo, error) {
	a, err := f.resolve(filename, true)
	if err != nil {
		return nil, f.wrap("stat", filename, err)
	}
	return &FileInfo{a, baseName(filename)}, nil
}

// Lstat returns the FileInfo of filename without following a final symlink.
func (f *Billy) Lstat(filename string) (os.FileInfo, error) {
	a, err := f.resolve(filename, false)
	if err != nil {
		return nil, f.wrap("lstat", filename, err)
	}
	return &FileInfo{a, baseName(filename)}, nil
}

// Rename moves oldpath to newpath, creating no directories.
func (f *Billy) Rename(oldpath, newpath string) error {
	od, on, err := f.parentOf(oldpath)
	if err != nil {
		return f.wrap("rename", oldpath, err)
	}
	nd, nn, err := f.parentOf(newpath)
	if err != nil {
		return f.wrap("rename", newpath, err)
	}
	return f.wrap("rename", oldpath, f.rename(od.Ino, on, nd.Ino, nn))
}

// Remove removes a file or an empty directory.
func (f *Billy) Remove(filename string) error {
	d, name, err := f.parentOf(filename)
	if err != nil {
		return f.wrap("remove", filename, err)
	}
	a, err := f.lookup(d.Ino, name)
	if err != nil {
		return f.wrap("remove", filename, err)
	}
	return f.wrap("remove", filename, f.remove(d.Ino, name, a.Type == TypeDir))
}

// Join joins path elements.
func (f *Billy) Join(elem ...string) string { return path.Join(elem...) }

var tempMu sync.Mutex
var tempSeq uint64

// TempFile creates a new file with a unique name in dir.
func (f *Billy) TempFile(dir, prefix string) (billy.File, error) {
	if err := f.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	for i := 0; i < 1000; i++ {
		tempMu.Lock()
		tempSeq++
		n := tempSeq
		tempMu.Unlock()
		name := path.Join(dir, prefix+itoa(uint64(time.Now().UnixNano())%1e9+n))
		file, err := f.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return file, err
	}
	return nil, pathErr("tempfile", dir, syscall.EEXIST)
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// ReadDir lists a directory sorted by name.
func (f *Billy) ReadDir(p string) ([]os.FileInfo, error) {
	d, err := f.resolve(p, true)
	if err != nil {
		return nil, f.wrap("readdir", p, err)
	}
	var out []os.FileInfo
	cookie := uint64(0)
	for {
		ents, eof, err := f.readDir(d.Ino, cookie, 1024)
		if err != nil {
			return nil, f.wrap("readdir", p, err)
		}
		for _, e := range ents {
			a, err := f.getAttr(e.Ino)
			if err != nil {
				continue // removed meanwhile
			}
			out = append(out, &FileInfo{a, e.Name})
			cookie = e.Cookie
		}
		if eof || len(ents) == 0 {
			break
		}
	}
	sortInfos(out)
	return out, nil
}

func sortInfos(v []os.FileInfo) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j].Name() < v[j-1].Name(); j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// MkdirAll creates a directory and its missing parents.
func (f *Billy) MkdirAll(filename string, perm os.FileMode) error {
	parts, err := splitPath(filename)
	if err != nil {
		return f.wrap("mkdir", filename, err)
	}
	cur, err := f.getAttr(RootIno)
	if err != nil {
		return f.wrap("mkdir", filename, err)
	}
	for i, name := range parts {
		next, err := f.walk(cur.Ino, []string{name}, true, 0)
		if errors.Is(err, syscall.ENOENT) {
			next, err = f.mknode(cur.Ino, name, TypeDir, NewAttr{Mode: modeToPOSIX(perm)}, "")
			if errors.Is(err, fs.ErrExist) {
				next, err = f.walk(cur.Ino, []string{name}, true, 0)
			}
		}
		if err != nil {
			return f.wrap("mkdir", path.Join(parts[:i+1]...), err)
		}
		if next.Type != TypeDir {
			return pathErr("mkdir", path.Join(parts[:i+1]...), syscall.ENOTDIR)
		}
		cur = next
	}
	return nil
}

// Symlink creates link pointing to target.
func (f *Billy) Symlink(target, link string) error {
	d, name, err := f.parentOf(link)
	if err != nil {
		return f.wrap("symlink", link, err)
	}
	_, err = f.mknode(d.Ino, name, TypeSymlink, NewAttr{Mode: 0o777}, target)
	return f.wrap("symlink", link, err)
}

// Readlink returns the target of a symlink.
func (f *Billy) Readlink(link string) (string, error) {
	a, err := f.resolve(link, false)
	if err != nil {
		return "", f.wrap("readlink", link, err)
	}
	t, err := f.readlink(a.Ino)
	return t, f.wrap("readlink", link, err)
}

// Link creates newname as a hard link to oldname.
func (f *Billy) Link(oldname, newname string) error {
	a, err := f.resolve(oldname, false)
	if err != nil {
		return f.wrap("link", oldname, err)
	}
	d, name, err := f.parentOf(newname)
	if err != nil {
		return f.wrap("link", newname, err)
	}
	_, err = f.link(a.Ino, d.Ino, name)
	return f.wrap("link", newname, err)
}

// Chroot returns a view of the subtree at p.
func (f *Billy) Chroot(p string) (billy.Filesystem, error) {
	if _, err := splitPath(p); err != nil {
		return nil, f.wrap("chroot", p, err)
	}
	return chroot.New(f, p), nil
}

// Root returns the root path of the view.
func (f *Billy) Root() string { return "/" }

// Capabilities reports what the view supports; read-only views lack
// WriteCapability, so go-nfs style servers answer ROFS.
func (f *Billy) Capabilities() billy.Capability {
	c := billy.ReadCapability | billy.SeekCapability
	if !f.opts.ReadOnly {
		c |= billy.WriteCapability | billy.ReadAndWriteCapability | billy.TruncateCapability
	}
	return c
}

// Chmod changes the mode of name (setuid, setgid and sticky included).
func (f *Billy) Chmod(name string, mode os.FileMode) error {
	a, err := f.resolve(name, true)
	if err != nil {
		return f.wrap("chmod", name, err)
	}
	m := modeToPOSIX(mode)
	_, err = f.setAttr(a.Ino, SetAttr{Mode: &m})
	return f.wrap("chmod", name, err)
}

// Lchown changes the owner of name without following a symlink.
func (f *Billy) Lchown(name string, uid, gid int) error { return f.chown(name, uid, gid, false) }

// Chown changes the owner of name.
func (f *Billy) Chown(name string, uid, gid int) error { return f.chown(name, uid, gid, true) }

func (f *Billy) chown(name string, uid, gid int, follow bool) error {
	a, err := f.resolve(name, follow)
	if err != nil {
		return f.wrap("chown", name, err)
	}
	var sa SetAttr
	if uid >= 0 {
		u := uint32(uid)
		sa.UID = &u
	}
	if gid >= 0 {
		g := uint32(gid)
		sa.GID = &g
	}
	_, err = f.setAttr(a.Ino, sa)
	return f.wrap("chown", name, err)
}

// Chtimes sets access and modification times.
func (f *Billy) Chtimes(name string, atime, mtime time.Time) error {
	a, err := f.resolve(name, true)
	if err != nil {
		return f.wrap("chtimes", name, err)
	}
	_, err = f.setAttr(a.Ino, SetAttr{Atime: &atime, Mtime: &mtime})
	return f.wrap("chtimes", name, err)
}

// modeToPOSIX converts Go FileMode permission bits to POSIX bits.
func modeToPOSIX(m os.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		p |= ModeSetuid
	}
	if m&os.ModeSetgid != 0 {
		p |= ModeSetgid
	}
	if m&os.ModeSticky != 0 {
		p |= ModeSticky
	}
	return p
}

// goMode converts an Attr's type and POSIX mode to a Go FileMode.
func goMode(a Attr) os.FileMode {
	m := os.FileMode(a.Mode & 0o777)
	if a.Mode&ModeSetuid != 0 {
		m |= os.ModeSetuid
	}
	if a.Mode&ModeSetgid != 0 {
		m |= os.ModeSetgid
	}
	if a.Mode&ModeSticky != 0 {
		m |= os.ModeSticky
	}
	switch a.Type {
	case TypeDir:
		m |= os.ModeDir
	case TypeSymlink:
		m |= os.ModeSymlink
	case TypeFIFO:
		m |= os.ModeNamedPipe
	case TypeSocket:
		m |= os.ModeSocket
	case TypeChar:
		m |= os.ModeDevice | os.ModeCharDevice
	case TypeBlock:
		m |= os.ModeDevice
	}
	return m
}

// FileInfo is the os.FileInfo of an inode reached by a name (a hard
// link's names differ); Sys returns *Attr.
type FileInfo struct {
	A    Attr
	name string
}

func (i *FileInfo) Name() string       { return i.name }
func (i *FileInfo) Size() int64        { return int64(i.A.Size) }
func (i *FileInfo) Mode() os.FileMode  { return goMode(i.A) }
func (i *FileInfo) ModTime() time.Time { return i.A.Mtime }
func (i *FileInfo) IsDir() bool        { return i.A.Type == TypeDir }
func (i *FileInfo) Sys() any           { return &i.A }

// File is an open file of a view: an inode number and an offset.
type File struct {
	fs     *View
	ino    InodeID
	name   string
	flag   int
	append bool

	mu     sync.Mutex // protects the following
	off    int64
	closed bool
}

// Ino returns the file's inode number.
func (h *File) Ino() InodeID { return h.ino }

func (h *File) Name() string { return h.name }

func (h *File) check(write bool) error {
	if h.closed {
		return os.ErrClosed
	}
	if write && h.flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		return pathErr("write", h.name, syscall.EBADF)
	}
	if !write && h.flag&os.O_WRONLY != 0 {
		return pathErr("read", h.name, syscall.EBADF)
	}
	return nil
}

func (h *File) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.check(true); err != nil {
		return 0, err
	}
	if h.append {
		a, err := h.fs.getAttr(h.ino)
		if err != nil {
			return 0, err
		}
		h.off = int64(a.Size)
	}
	if _, err := h.fs.writeAt(h.ino, p, h.off, WriteOptions{}); err != nil {
		return 0, h.fs.wrap("write", h.name, err)
	}
	h.off += int64(len(p))
	return len(p), nil
}

// WriteAt writes p at off (io.WriterAt).
func (h *File) WriteAt(p []byte, off int64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.check(true); err != nil {
		return 0, err
	}
	if _, err := h.fs.writeAt(h.ino, p, off, WriteOptions{}); err != nil {
		return 0, h.fs.wrap("write", h.name, err)
	}
	return len(p), nil
}

func (h *File) Read(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.check(false); err != nil {
		return 0, err
	}
	n, err := h.readAt(p, h.off)
	h.off += int64(n)
	return n, err
}

func (h *File) ReadAt(p []byte, off int64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.check(false); err != nil {
		return 0, err
	}
	return h.readAt(p, off)
}

func (h *File) readAt(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, eof, err := h.fs.readAt(h.ino, p, off)
	if err != nil {
		return n, h.fs.wrap("read", h.name, err)
	}
	if n < len(p) || (eof && n == 0) {
		return n, io.EOF
	}
	return n, nil
}

func (h *File) Seek(offset int64, whence int) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, os.ErrClosed
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += h.off
	case io.SeekEnd:
		a, err := h.fs.getAttr(h.ino)
		if err != nil {
			return 0, err
		}
		offset += int64(a.Size)
	default:
		return 0, pathErr("seek", h.name, syscall.EINVAL)
	}
	if offset < 0 {
		return 0, pathErr("seek", h.name, syscall.EINVAL)
	}
	h.off = offset
	return offset, nil
}

func (h *File) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return os.ErrClosed
	}
	h.closed = true
	return nil
}

// Lock and Unlock are no-ops: locking is left to NFS clients (nolock).
func (h *File) Lock() error   { return nil }
func (h *File) Unlock() error { return nil }

func (h *File) Truncate(size int64) error {
	if size < 0 {
		return pathErr("truncate", h.name, syscall.EINVAL)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.check(true); err != nil {
		return err
	}
	s := uint64(size)
	_, err := h.fs.setAttr(h.ino, SetAttr{Size: &s})
	return h.fs.wrap("truncate", h.name, err)
}

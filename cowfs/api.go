package cowfs

import (
	"context"
)

// The inode-level API of a view. The NFS layer uses it directly; the
// path-based go-billy API in billy.go is built on it.
//
// Errors are unwrapped *fs.PathError values whose Err is a syscall.Errno
// (ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, ENAMETOOLONG, EINVAL, EROFS,
// ENOSPC, ESTALE, EFBIG, EXDEV, EIO, ELOOP, EPERM), so os.IsNotExist and friends
// work, and errors.As(err, new(syscall.Errno)) gives the code. A view whose
// branch was invalidated or aborted answers ESTALE for every call; Err()
// tells why. None of these calls checks permissions: callers (nfsserver) do.

// GetAttr returns the attributes of ino. ESTALE if ino does not exist in
// this view (deleted, or never existed).
func (f *View) GetAttr(ino InodeID) (Attr, error) { return f.getAttr(ino) }

// GetAttrs returns the attributes of each of inos, nil for one that does
// not exist in this view, read in one store transaction (READDIRPLUS reads
// a listing's attributes with it). The error is about the view or the
// store, never about one inode.
func (f *View) GetAttrs(inos []InodeID) ([]*Attr, error) { return f.getAttrs(inos) }

// Lookup finds name in directory dir.
func (f *View) Lookup(dir InodeID, name string) (Attr, error) { return f.lookup(dir, name) }

// LookupDir is Lookup that also returns dir's attributes, read in the same
// store transaction as the lookup (LOOKUP answers with both). d is zero
// when the error is about dir itself (ESTALE); otherwise d is set, also
// when name is not found.
func (f *View) LookupDir(dir InodeID, name string) (d, a Attr, err error) {
	return f.lookupDir(dir, name)
}

// Create creates (or, per how, opens) a regular file in dir.
func (f *View) Create(dir InodeID, name string, how CreateHow, a NewAttr, verifier uint64) (Attr, error) {
	return f.create(dir, name, how, a, verifier)
}

// Mkdir creates a directory.
func (f *View) Mkdir(dir InodeID, name string, a NewAttr) (Attr, error) {
	return f.mknode(dir, name, TypeDir, a, "")
}

// Symlink creates a symbolic link to target.
func (f *View) Symlink(dir InodeID, name, target string, a NewAttr) (Attr, error) {
	return f.mknode(dir, name, TypeSymlink, a, target)
}

// Mknod creates a FIFO, socket, or block or character device (metadata only).
func (f *View) Mknod(dir InodeID, name string, t FileType, a NewAttr) (Attr, error) {
	return f.mknode(dir, name, t, a, "")
}

// Link adds a hard link dir/name to ino (not a directory: EPERM).
func (f *View) Link(ino InodeID, dir InodeID, name string) (Attr, error) {
	return f.link(ino, dir, name)
}

// Unlink removes a non-directory entry (EISDIR for a directory).
func (f *View) Unlink(dir InodeID, name string) error { return f.remove(dir, name, false) }

// Rmdir removes an empty directory (ENOTEMPTY, ENOTDIR).
func (f *View) Rmdir(dir InodeID, name string) error { return f.remove(dir, name, true) }

// Rename moves srcDir/srcName to dstDir/dstName with POSIX rename semantics
// (replacing a compatible destination; EINVAL when moving a directory into
// itself).
func (f *View) Rename(srcDir InodeID, srcName string, dstDir InodeID, dstName string) error {
	return f.rename(srcDir, srcName, dstDir, dstName)
}

// ReadAt reads up to len(p) bytes at off. eof is true when the read reached
// the end of the file.
func (f *View) ReadAt(ino InodeID, p []byte, off int64) (n int, eof bool, err error) {
	return f.readAt(ino, p, off)
}

// ReadInto reads ino's attributes and up to count bytes at off in one
// store snapshot, so the attributes are those of the data read (a READ
// answers with both). Once the attributes are read it calls buf with them
// and n, count clamped to the file's size (0 at or past the end); buf
// returns the buffer for the n bytes (at least n long) or an error, which
// ends the call and is returned, wrapped as the others. buf sees the
// attributes of any file type (ReadInto answers EISDIR or EINVAL after it
// returns), and may be called again, with the attributes of a later
// snapshot, when the read is retried. eof is true when the read reached
// the end of the file.
func (f *View) ReadInto(ino InodeID, off uint64, count int, buf func(a *Attr, n int) ([]byte, error)) (n int, eof bool, err error) {
	return f.readInto(ino, off, count, buf)
}

// WriteAt writes p at off and returns the attributes after the write. The
// write is in the store (survives a crash of the process) when it returns;
// call Sync for durability against power loss.
func (f *View) WriteAt(ino InodeID, p []byte, off int64) (Attr, error) {
	return f.writeAt(ino, p, off, WriteOptions{})
}

// WriteAtOpts is WriteAt with options (clearing setuid and setgid).
func (f *View) WriteAtOpts(ino InodeID, p []byte, off int64, o WriteOptions) (Attr, error) {
	return f.writeAt(ino, p, off, o)
}

// SetAttr changes only what sa says and returns the new attributes.
func (f *View) SetAttr(ino InodeID, sa SetAttr) (Attr, error) { return f.setAttr(ino, sa) }

// SetAttrChecked changes ino's attributes as check decides from the
// attributes they have in the same transaction: check may refuse (its
// error, a syscall.Errno, is returned wrapped and nothing changes) or
// return the change, which no other change can come between. A
// permission check made this way cannot be overtaken by another client's
// chown or chmod. check may run more than once (transactions retry on
// conflicts). An empty change sets the change time, as SetAttr does. It
// returns the attributes before and after. truncate says whether check
// may set a size.
func (f *View) SetAttrChecked(ino InodeID, truncate bool, check func(cur Attr) (SetAttr, error)) (pre, post Attr, err error) {
	return f.setAttrChecked(ino, truncate, check)
}

// Readlink returns a symlink's target (EINVAL if ino is not a symlink).
func (f *View) Readlink(ino InodeID) (string, error) { return f.readlink(ino) }

// ReadDir lists directory dir in cookie order, starting after cookie (0 for
// the beginning), returning at most n entries. "." and ".." are not listed.
// eof is true when no entries follow.
func (f *View) ReadDir(dir InodeID, cookie uint64, n int) (entries []DirEntry, eof bool, err error) {
	return f.readDir(dir, cookie, n)
}

// PathOf returns the path of ino relative to the root ("" for the root,
// "a/b" otherwise), following its first link.
func (f *View) PathOf(ino InodeID) (string, error) { return f.pathOf(ino) }

// Sync makes everything written so far durable against power loss.
func (f *View) Sync(ctx context.Context) error { return f.store.Sync(ctx) }

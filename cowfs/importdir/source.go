package importdir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Reading the source without following anything the import did not list.
//
// The walk holds a descriptor of each directory on its way down and reaches
// every entry relative to its directory's descriptor (fstatat, openat,
// readlinkat), never by path, so a directory swapped for a symlink cannot
// lead it outside the source. An entry is opened only when its lstat said
// it is a directory or a regular file, with O_NOFOLLOW (a symlink put in
// its place fails to open) and O_NONBLOCK (a FIFO put in its place cannot
// block the open); the opened descriptor's type, device and inode must be
// those of the lstat, and no more than the lstat's size is read. FIFOs,
// sockets and devices are never opened: their attributes come from the
// lstat alone.

// beforeOpen, when set (by tests), runs between an entry's lstat and its
// open or readlink, with the entry's path relative to the source.
var beforeOpen func(rel string)

// srcDir is an open source directory.
type srcDir struct {
	f   *os.File
	fd  int
	rel string
}

// openRoot opens the source directory itself (following symlinks: the
// user named it) and returns it with its stat.
func openRoot(path string) (*srcDir, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, st, fmt.Errorf("importdir: %s is not a directory", path)
		}
		return nil, st, fmt.Errorf("importdir: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, fmt.Errorf("importdir: %w", &os.PathError{Op: "fstat", Path: path, Err: err})
	}
	return &srcDir{f: os.NewFile(uintptr(fd), path), fd: fd}, st, nil
}

func (d *srcDir) Close() error { return d.f.Close() }

// names lists the directory's entries ("." and ".." left out).
func (d *srcDir) names() ([]string, error) {
	return d.f.Readdirnames(-1)
}

// lstat stats entry name without following a symlink.
func (d *srcDir) lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func fileType(st *unix.Stat_t) uint32 { return uint32(st.Mode) & unix.S_IFMT }

func typeName(t uint32) string {
	switch t {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "of an unknown type"
}

// changedError is ErrChanged with the details; wrap adds the path.
type changedError struct{ msg string }

func (e *changedError) Error() string        { return e.msg }
func (e *changedError) Is(target error) bool { return target == ErrChanged }

// changed is the error for an entry that is no longer what its lstat said.
func changed(was *unix.Stat_t, now string) error {
	return &changedError{fmt.Sprintf("changed during the import: it was %s when listed, %s when read; run the import again once the source stays still",
		typeName(fileType(was)), now)}
}

// nowIs describes what entry name is now.
func (d *srcDir) nowIs(name string) string {
	st, err := d.lstat(name)
	if err != nil {
		return "gone"
	}
	return typeName(fileType(&st))
}

// open opens entry name, which lstat said is st (a directory or a regular
// file), and checks that it is still that entry.
func (d *srcDir) open(name string, st *unix.Stat_t) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	t := fileType(st)
	if t == unix.S_IFDIR {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Openat(d.fd, name, flags, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EMLINK), errors.Is(err, unix.ENOTDIR),
			errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENXIO):
			// O_NOFOLLOW on a symlink (ELOOP; ENOTDIR with O_DIRECTORY),
			// the entry removed, or a socket.
			return nil, changed(st, d.nowIs(name))
		}
		return nil, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if fileType(&now) != t {
		unix.Close(fd)
		return nil, changed(st, typeName(fileType(&now)))
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		unix.Close(fd)
		return nil, changed(st, "another file")
	}
	if t == unix.S_IFREG {
		// Reads of regular files never block; clear O_NONBLOCK anyway, so
		// that nothing depends on it.
		unix.SetNonblock(fd, false)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// openDir opens subdirectory name, which lstat said is st.
func (d *srcDir) openDir(name, rel string, st *unix.Stat_t) (*srcDir, error) {
	f, err := d.open(name, st)
	if err != nil {
		return nil, err
	}
	return &srcDir{f: f, fd: int(f.Fd()), rel: rel}, nil
}

// readlink reads symlink name, which lstat said is st.
func (d *srcDir) readlink(name string, st *unix.Stat_t) (string, error) {
	size := int(st.Size) + 1
	if size < 256 {
		size = 256
	}
	for {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(d.fd, name, buf)
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				return "", changed(st, d.nowIs(name))
			}
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		size *= 2
	}
}

// sizedReader reads exactly size bytes of an opened regular file, and
// fails with ErrChanged if it holds fewer or more.
type sizedReader struct {
	f    *os.File
	st   *unix.Stat_t
	left int64
}

func (r *sizedReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		// Whatever the file holds now, no more than the listed size is
		// read: one byte more tells whether it grew.
		var b [1]byte
		if n, _ := r.f.Read(b[:]); n > 0 {
			return 0, changed(r.st, fmt.Sprintf("longer than its %d bytes", r.st.Size))
		}
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.f.Read(p)
	r.left -= int64(n)
	if err == io.EOF && r.left > 0 {
		return n, changed(r.st, fmt.Sprintf("shorter than its %d bytes", r.st.Size))
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func tsTime(ts unix.Timespec) time.Time { return time.Unix(int64(ts.Sec), int64(ts.Nsec)) }

package cowfs

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"syscall"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
)

// ErrFormat is returned by Open for a store written in a format this
// build does not know (by a newer branchnfs).
var ErrFormat = errors.New("cowfs: unknown store format")

// FormatError is the ErrFormat of a store whose format is newer than the
// newest this build reads.
type FormatError struct {
	Store uint64 // the store's format
	Build uint64 // the newest format this build reads
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: store format %d is newer than this build's %d; use a newer branchnfs", ErrFormat, e.Store, e.Build)
}

// Is makes errors.Is(err, ErrFormat) hold.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// pathErr builds the unwrapped *fs.PathError every call returns: go-nfs and
// os.IsNotExist look at Err directly and do not unwrap %w chains.
func pathErr(op, path string, errno syscall.Errno) error {
	return &fs.PathError{Op: op, Path: path, Err: errno}
}

// toErrno maps an internal error to an errno: kv errors and corrupt records
// included.
func toErrno(err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case errors.Is(err, kv.ErrUnavailable), errors.Is(err, kv.ErrUnknownOutcome), errors.Is(err, blobs.ErrUnavailable),
		errors.Is(err, kv.ErrLeaseLost):
		// The store or the blob store does not answer for now, or the
		// lease a write relied on was lost (the next attempt takes a
		// new one): the same call may succeed later (NFS3ERR_JUKEBOX).
		// Before the errno: a network error of the client (a refused
		// connection) wraps one, which is no answer for the file.
		return syscall.EAGAIN
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, kv.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, kv.ErrTxnTooBig):
		return syscall.EFBIG
	case errors.Is(err, kv.ErrClosed):
		return syscall.ESTALE
	case errors.Is(err, kv.ErrFenced):
		// Another server owns the branch now (kv.Fence).
		return syscall.EROFS
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrPermission):
		return syscall.EPERM
	}
	return syscall.EIO
}

// wrap converts any error to the PathError form, logging an unexpected one
// to the view's logger before it is flattened to EIO.
func (f *View) wrap(op, path string, err error) error {
	return wrapLog(f.opts.Logger, op, path, err)
}

// wrap is View.wrap for code without a view: it logs to slog.Default().
func wrap(op, path string, err error) error {
	return wrapLog(slog.Default(), op, path, err)
}

func wrapLog(log *slog.Logger, op, path string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if _, ok := pe.Err.(syscall.Errno); ok {
			return &fs.PathError{Op: op, Path: path, Err: pe.Err}
		}
	}
	e := toErrno(err)
	switch e {
	case syscall.EIO:
		log.Warn("cowfs: unexpected error", "op", op, "path", path, "err", err)
	case syscall.EAGAIN:
		log.Warn("cowfs: store unavailable; the client is told to try again later", "op", op, "path", path, "err", err)
	}
	return pathErr(op, path, e)
}

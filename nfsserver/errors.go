package nfsserver

import (
	"context"
	"errors"
	"syscall"

	nfs "github.com/willscott/go-nfs"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// Errors the server raises itself, besides the syscall.Errno values it
// shares with cowfs (EACCES, EPERM, EINVAL, ...).
var (
	// errNotSync: a SETATTR guard did not match the object's ctime.
	errNotSync = errors.New("nfsserver: setattr guard mismatch")
	// errBadType: MKNOD of a type it cannot create.
	errBadType = errors.New("nfsserver: bad file type")
	// errTooSmall: a READDIR reply buffer too small for one entry.
	errTooSmall = errors.New("nfsserver: reply buffer too small")
)

// nfsStatus maps an error to its NFSv3 status. It is the one place where
// errors become NFS codes. ok is false for errors that have no specific
// code (they answer NFS3ERR_IO and deserve a log line).
func nfsStatus(err error) (st nfs.NFSStatus, ok bool) {
	if err == nil {
		return nfs.NFSStatusOk, true
	}
	switch {
	case errors.Is(err, errBadHandle):
		return nfs.NFSStatusBadHandle, true
	case errors.Is(err, errNotSync):
		return nfs.NFSStatusNotSync, true
	case errors.Is(err, errBadType):
		return nfs.NFSStatusBadType, true
	case errors.Is(err, errTooSmall):
		return nfs.NFSStatusTooSmall, true
	case errors.Is(err, branches.ErrStale), errors.Is(err, branches.ErrNotFound):
		// A handle's branch was invalidated, committed or aborted.
		return nfs.NFSStatusStale, true
	case errors.Is(err, branches.ErrInvalidName):
		// An export or root-export name that cannot be a branch.
		return nfs.NFSStatusNoEnt, true
	case errors.Is(err, branches.ErrNoSpace):
		return nfs.NFSStatusNoSPC, true
	case errors.Is(err, kv.ErrUnavailable), errors.Is(err, kv.ErrUnknownOutcome), errors.Is(err, blobs.ErrUnavailable),
		errors.Is(err, kv.ErrLeaseLost):
		// The metadata cluster or the bucket does not answer for now,
		// or this server is getting its lease back and may own the
		// branch again (cowfs says so with EAGAIN, below): the client
		// retries later and keeps its buffered writes (docs/nfs.md,
		// "Errors"). Before ErrNotOwner and the errnos: such an error
		// may wrap a network errno, which says nothing of the file.
		return nfs.NFSStatusJukebox, true
	case errors.Is(err, branches.ErrReadOnly), errors.Is(err, branches.ErrNotOwner), errors.Is(err, kv.ErrFenced):
		// Not owned: another server of a shared store writes the branch
		// (kv.ErrFenced: it took the branch over, and the commit that
		// compared the owner key said so).
		return nfs.NFSStatusROFS, true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EPERM:
			return nfs.NFSStatusPerm, true
		case syscall.ENOENT:
			return nfs.NFSStatusNoEnt, true
		case syscall.EIO:
			return nfs.NFSStatusIO, true
		case syscall.ENXIO, syscall.ENODEV:
			return nfs.NFSStatusNXIO, true
		case syscall.EACCES:
			return nfs.NFSStatusAccess, true
		case syscall.EEXIST:
			return nfs.NFSStatusExist, true
		case syscall.EXDEV:
			return nfs.NFSStatusXDev, true
		case syscall.ENOTDIR:
			return nfs.NFSStatusNotDir, true
		case syscall.EISDIR:
			return nfs.NFSStatusIsDir, true
		case syscall.EINVAL, syscall.ELOOP:
			return nfs.NFSStatusInval, true
		case syscall.EFBIG:
			return nfs.NFSStatusFBig, true
		case syscall.ENOSPC:
			return nfs.NFSStatusNoSPC, true
		case syscall.EROFS:
			return nfs.NFSStatusROFS, true
		case syscall.EMLINK:
			return nfs.NFSStatusMlink, true
		case syscall.ENAMETOOLONG:
			return nfs.NFSStatusNameTooLong, true
		case syscall.ENOTEMPTY:
			return nfs.NFSStatusNotEmpty, true
		case syscall.EDQUOT:
			return nfs.NFSStatusDQuot, true
		case syscall.ESTALE:
			return nfs.NFSStatusStale, true
		case syscall.ENOTSUP:
			return nfs.NFSStatusNotSupp, true
		case syscall.EAGAIN, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH:
			// A backend out of reach (an error that lost its
			// ErrUnavailable on the way): try again later.
			return nfs.NFSStatusJukebox, true
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nfs.NFSStatusServerFault, false
	}
	return nfs.NFSStatusIO, false
}

// mountStatus maps an error to a MOUNT v3 mountstat3.
func mountStatus(err error) uint32 {
	const (
		mnt3OK          = 0
		mnt3ErrNoEnt    = 2
		mnt3ErrIO       = 5
		mnt3ErrAcces    = 13
		mnt3ErrNotDir   = 20
		mnt3ErrInval    = 22
		mnt3ErrTooLong  = 63
		mnt3ErrSrvFault = 10006
	)
	if err == nil {
		return mnt3OK
	}
	st, _ := nfsStatus(err)
	switch st {
	case nfs.NFSStatusNoEnt, nfs.NFSStatusStale:
		return mnt3ErrNoEnt
	case nfs.NFSStatusAccess, nfs.NFSStatusPerm:
		return mnt3ErrAcces
	case nfs.NFSStatusNotDir:
		return mnt3ErrNotDir
	case nfs.NFSStatusInval:
		return mnt3ErrInval
	case nfs.NFSStatusNameTooLong:
		return mnt3ErrTooLong
	case nfs.NFSStatusServerFault:
		return mnt3ErrSrvFault
	}
	return mnt3ErrIO
}

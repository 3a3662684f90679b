package s3gw

import (
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/versity/versitygw/s3err"
)

// ErrCredentials is returned by ReadCredentials when the credentials file
// is malformed or readable by others than its owner.
var ErrCredentials = errors.New("s3gw: bad credentials file")

func apiErr(code string, status int, format string, args ...any) s3err.APIError {
	return s3err.APIError{Code: code, Description: fmt.Sprintf(format, args...), HTTPStatusCode: status}
}

// bucketErr maps an error of branches.Manager.View to an S3 error.
func bucketErr(bucket string, err error) error {
	var inv *branches.InvalidatedError
	switch {
	case errors.As(err, &inv):
		return apiErr("NoSuchBucket", http.StatusNotFound,
			"branch %q was invalidated by the %s: its changes cannot be committed; fork a new branch (CreateBucket) and redo them", inv.Branch, inv.By)
	case errors.Is(err, branches.ErrNotFound), errors.Is(err, branches.ErrStale):
		return apiErr("NoSuchBucket", http.StatusNotFound, "no live branch %q (branchnfs list shows the live branches)", bucket)
	case errors.Is(err, branches.ErrInvalidName):
		return apiErr("NoSuchBucket", http.StatusNotFound, "%q is not a branch name: want 1-64 of A-Z a-z 0-9 . _ -", bucket)
	}
	return err
}

// fsErr maps a cowfs error met on bucket/key to an S3 error.
func fsErr(bucket, key string, err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		return s3err.GetAPIError(s3err.ErrNoSuchKey)
	case syscall.ESTALE:
		// An inode the request had found went away (a concurrent delete
		// of its directory), or the branch was committed, aborted or
		// invalidated: clients retry a 503, and the retry finds out.
		return apiErr("ServiceUnavailable", http.StatusServiceUnavailable, "%s/%s changed during the request (a concurrent delete, or the branch ended): retry", bucket, key)
	case syscall.EROFS:
		return apiErr("AccessDenied", http.StatusForbidden,
			"bucket %q is read-only: a checkpoint (BRANCH--LABEL) never changes, and on a shared store main changes only through commits and a branch only on the server that owns it", bucket)
	case syscall.EACCES, syscall.EPERM:
		return apiErr("AccessDenied", http.StatusForbidden, "%s/%s: permission denied", bucket, key)
	case syscall.ENOSPC, syscall.EDQUOT:
		return apiErr("InsufficientStorage", http.StatusInsufficientStorage, "no space left for %s/%s: free space on the store's disk (branchnfs gc) and retry", bucket, key)
	case syscall.ENAMETOOLONG:
		return s3err.GetKeyTooLongErr(int64(len(key)), 255)
	case syscall.EISDIR, syscall.EEXIST, syscall.ENOTEMPTY:
		return apiErr("InvalidArgument", http.StatusConflict, "%s/%s: a directory of the branch has this name, or one of the key's parents is a file", bucket, key)
	}
	return err
}

func isGone(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno) && (errno == syscall.ENOENT || errno == syscall.ENOTDIR)
}

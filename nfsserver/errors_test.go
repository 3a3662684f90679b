package nfsserver

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"

	nfs "github.com/willscott/go-nfs"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
)

func TestNFSStatus(t *testing.T) {
	pe := func(e syscall.Errno) error { return &fs.PathError{Op: "op", Path: "p", Err: e} }
	cases := []struct {
		err  error
		want nfs.NFSStatus
	}{
		{nil, nfs.NFSStatusOk},
		{pe(syscall.ENOENT), nfs.NFSStatusNoEnt},
		{pe(syscall.EEXIST), nfs.NFSStatusExist},
		{pe(syscall.ENOTDIR), nfs.NFSStatusNotDir},
		{pe(syscall.EISDIR), nfs.NFSStatusIsDir},
		{pe(syscall.ENOTEMPTY), nfs.NFSStatusNotEmpty},
		{pe(syscall.ENAMETOOLONG), nfs.NFSStatusNameTooLong},
		{pe(syscall.ENOSPC), nfs.NFSStatusNoSPC},
		{pe(syscall.EROFS), nfs.NFSStatusROFS},
		{pe(syscall.EACCES), nfs.NFSStatusAccess},
		{pe(syscall.EPERM), nfs.NFSStatusPerm},
		{pe(syscall.EXDEV), nfs.NFSStatusXDev},
		{pe(syscall.ESTALE), nfs.NFSStatusStale},
		{pe(syscall.EFBIG), nfs.NFSStatusFBig},
		{pe(syscall.EINVAL), nfs.NFSStatusInval},
		{pe(syscall.EIO), nfs.NFSStatusIO},
		{pe(syscall.EMLINK), nfs.NFSStatusMlink},
		{syscall.EACCES, nfs.NFSStatusAccess},
		{errBadHandle, nfs.NFSStatusBadHandle},
		{&branches.NotOwnerError{Branch: "b", Owner: "h:/s", Op: "write"}, nfs.NFSStatusROFS},
		{errNotSync, nfs.NFSStatusNotSync},
		{errTooSmall, nfs.NFSStatusTooSmall},
		{errBadType, nfs.NFSStatusBadType},
		{fmt.Errorf("x: %w", branches.ErrNotFound), nfs.NFSStatusStale},
		{&branches.InvalidatedError{Branch: "b", By: "commit"}, nfs.NFSStatusStale},
		{branches.ErrNoSpace, nfs.NFSStatusNoSPC},
		{fmt.Errorf("weird"), nfs.NFSStatusIO},
		// The metadata store out of reach, however the error wraps it.
		{etcdkv.ErrUnavailable, nfs.NFSStatusJukebox},
		{fmt.Errorf("%w: %w", etcdkv.ErrUnavailable, &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), nfs.NFSStatusJukebox},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, nfs.NFSStatusJukebox},
		{fmt.Errorf("commit: %w", kv.ErrUnknownOutcome), nfs.NFSStatusJukebox},
		{fmt.Errorf("%w: twice", kv.ErrLeaseLost), nfs.NFSStatusJukebox},
		// The owner lost its branch to another server (kv.Fence).
		{fmt.Errorf("%w: branch x is owned by lease 2", kv.ErrFenced), nfs.NFSStatusROFS},
	}
	for _, tc := range cases {
		if got, _ := nfsStatus(tc.err); got != tc.want {
			t.Errorf("nfsStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if mountStatus(branches.ErrNotFound) != 2 || mountStatus(syscall.ENOTDIR) != 20 || mountStatus(nil) != 0 {
		t.Error("mountStatus")
	}
}

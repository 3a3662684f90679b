package cowfs

import (
	"syscall"

	"github.com/branchnfs/branchnfs/kv"
)

// StatFS is Store.StatFS (FSSTAT asks it of a view).
func (f *View) StatFS() (StatFS, error) { return f.s.StatFS() }

// StatFS reports the space of the disk holding the store, as far as the
// store may use it: a store that keeps a free-space reserve
// (kv.SpaceReporter) does not count the reserve as free, so that clients
// see a full disk when writes start to fail with ENOSPC. A store within a
// server's quota (etcd: kv.Space.Quota) reports the quota and what is
// free of it, the limit its writes fail at; block content in a blob store
// (Options.Blobs, an S3 bucket) is not counted: a bucket has no size
// limit. Without a reporter it reports Options.StatDir's filesystem.
func (s *Store) StatFS() (StatFS, error) {
	if r, ok := s.kv.(kv.SpaceReporter); ok {
		// An in-memory store has no filesystem and says so.
		if sp, err := r.Space(); err == nil {
			return StatFS{
				TotalBytes: sp.TotalBytes, FreeBytes: sp.FreeBytes, AvailBytes: sp.AvailBytes,
				TotalFiles: sp.TotalFiles, FreeFiles: sp.FreeFiles,
			}, nil
		}
	}
	return statFS(s.opts.StatDir)
}

func statFS(dir string) (StatFS, error) {
	if dir == "" {
		// An in-memory store has no disk: report the process's.
		dir = "."
	}
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return StatFS{}, pathErr("statfs", dir, toErrno(err))
	}
	bs := uint64(s.Bsize)
	return StatFS{
		TotalBytes: uint64(s.Blocks) * bs,
		FreeBytes:  uint64(s.Bfree) * bs,
		AvailBytes: uint64(s.Bavail) * bs,
		TotalFiles: uint64(s.Files),
		FreeFiles:  uint64(s.Ffree),
	}, nil
}

// BlobsExternal reports whether block content lives in a blob store
// (Options.Blobs) rather than in the kv store, so that StatFS does not
// count it.
func (s *Store) BlobsExternal() bool { return s.blobs != nil }

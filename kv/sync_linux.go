package kv

import (
	"os"
	"syscall"

	badger "github.com/dgraph-io/badger/v4"
)

// syncMapped syncs what Badger wrote through its mmaps before logFiles
// fsyncs the files. On Linux an fsync writes back pages dirtied through a
// shared mapping like any others, so logFiles alone covers them.
func syncMapped(*badger.DB) error { return nil }

// syncFile makes f's data durable. A log file is synced with fdatasync:
// it writes back the data and the metadata needed to read it (the blocks a
// write into a sparse log allocated, a size change) and skips a journal
// commit for what reading does not need (the modification time a write
// through the mapping sets), which is what most fsyncs of a log Badger
// appends to in place would commit. A directory gets a full fsync.
func syncFile(f *os.File, dir bool) error {
	if dir {
		return f.Sync()
	}
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err == nil {
			return nil
		}
		if err != syscall.EINTR {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
	}
}

// inotifyWatch is a dirWatch on inotify: the kernel queues an event for
// each name created, removed or renamed in the directory before the call
// that made the change returns, so a non-blocking read finds every change
// made before it.
type inotifyWatch struct {
	fd  int
	buf [4096]byte
}

// newDirWatch watches dir, or returns nil (list every time) when inotify
// is not available.
func newDirWatch(dir string) dirWatch {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	const mask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO |
		syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF
	if _, err := syscall.InotifyAddWatch(fd, dir, mask); err != nil {
		syscall.Close(fd)
		return nil
	}
	return &inotifyWatch{fd: fd}
}

func (w *inotifyWatch) changed() bool {
	got := false
	for {
		n, err := syscall.Read(w.fd, w.buf[:])
		switch {
		case n > 0:
			got = true // any event, an overflow included
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return got
		default:
			return true // unknown: list again
		}
	}
}

func (w *inotifyWatch) close() error { return syscall.Close(w.fd) }

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
func syncFile(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
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

package kv

import (
	"os"

	badger "github.com/dgraph-io/badger/v4"
)

// syncMapped syncs what Badger wrote through its mmaps before logFiles
// fsyncs the files. macOS documents msync, not fsync, for pages dirtied
// through a mapping, so Badger's own DB.Sync (an msync of the active
// memtable's log and of the current value log) runs first.
func syncMapped(db *badger.DB) error { return db.Sync() }

// syncFile makes f's data durable: Go's File.Sync on macOS is
// fcntl(F_FULLFSYNC), which also flushes the drive's cache.
func syncFile(f *os.File, dir bool) error { return f.Sync() }

// newDirWatch returns nil: the directory is listed at every Sync.
func newDirWatch(string) dirWatch { return nil }

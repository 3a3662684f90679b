package runner

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// flush makes the NFS client send what it holds dirty for dir to the
// server: syncfs on its file system. Every branch of a mount of the export
// / may share that file system, and so its writeback errors: a fenced
// sibling's refused writes make syncfs fail too (once). When it fails,
// flush fsyncs every file under dir, which reports this branch's own
// errors only (each file's error is its own), and fails only if one does.
func flush(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := unix.Syncfs(int(f.Fd()))
	f.Close()
	if serr == nil {
		return nil
	}
	if err := fsyncTree(dir); err != nil {
		return fmt.Errorf("%w (syncfs: %v)", err, serr)
	}
	return nil
}

// fsyncTree fsyncs every regular file under dir.
func fsyncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("fsync %s: %w", p, err)
		}
		return nil
	})
}

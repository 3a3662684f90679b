//go:build linux || darwin

package blobs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir's lock file, held while the
// returned file stays open (a crashed process releases it).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("blobs: cache %s: %w; give a directory this user can write", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("blobs: cache %s is in use by another process (or another cache in this one): give each server its own cache directory", dir)
		}
		return nil, fmt.Errorf("blobs: cache %s: locking it: %w", dir, err)
	}
	return f, nil
}

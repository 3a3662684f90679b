package main

import (
	"errors"
	"fmt"

	"github.com/branchnfs/branchnfs/cowfs"
)

// newerStoreError is a store refused because a newer release wrote it:
// its message names the store's format, the newest this binary reads and
// this binary's version, so that the user knows which release to install.
type newerStoreError struct {
	dir string
	fe  *cowfs.FormatError
}

func (e *newerStoreError) Error() string {
	return fmt.Sprintf("store %s is of format %d, written by a newer branchnfs; this branchnfs %s reads store formats up to %d: install a newer release (branchnfs version tells which one runs)",
		e.dir, e.fe.Store, versionInfo().Version, e.fe.Build)
}

func (e *newerStoreError) Unwrap() error { return e.fe }

// openBranchesError is the error of opening the branches of the store in
// dir.
func openBranchesError(dir string, err error) error {
	var fe *cowfs.FormatError
	if errors.As(err, &fe) {
		return &newerStoreError{dir: dir, fe: fe}
	}
	return fmt.Errorf("open branches of %s: %w", dir, err)
}

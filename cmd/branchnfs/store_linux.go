package main

import (
	"os"
	"path/filepath"
)

const defaultStoreHint = "$XDG_DATA_HOME/branchnfs or ~/.local/share/branchnfs"

// defaultStoreDir is the per-user data directory of branchnfs on Linux.
func defaultStoreDir() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "branchnfs"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "share", "branchnfs"), nil
}

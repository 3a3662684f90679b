package main

import (
	"os"
	"path/filepath"
)

const defaultStoreHint = "~/Library/Application Support/branchnfs"

// defaultStoreDir is the per-user data directory of branchnfs on macOS.
func defaultStoreDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, "Library", "Application Support", "branchnfs"), nil
}

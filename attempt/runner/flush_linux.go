package runner

import (
	"os"

	"golang.org/x/sys/unix"
)

// flush makes the NFS client send what it holds dirty for the file system
// of dir to the server, and commit it there (syncfs).
func flush(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

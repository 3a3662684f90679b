package results

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncStaged makes the staged files of j durable: one syncfs of the
// folder's filesystem, rather than an fsync per file.
func syncStaged(root *os.Root, j *journal) error {
	d, err := root.Open(StageDir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}

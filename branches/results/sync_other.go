//go:build !linux

package results

import (
	"os"
	"path"
)

// syncStaged makes the staged files of j durable, one fsync each (no
// syncfs here).
func syncStaged(root *os.Root, j *journal) error {
	for _, st := range j.Steps {
		if st.Op != "put" || st.New.Type != TypeFile {
			continue
		}
		f, err := root.Open(path.Join(StageDir, st.Stage))
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return syncDir(root, StageDir)
}

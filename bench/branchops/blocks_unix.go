package branchops

import (
	"io/fs"
	"syscall"
)

// blocks returns the bytes allocated to a file (st_blocks*512), falling back
// to its size.
func blocks(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

package blobs

import "syscall"

// statID is the identity of the file st describes, and its link count.
func statID(st *syscall.Stat_t) (fileID, uint64) {
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, uint64(st.Nlink)
}

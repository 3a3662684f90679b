package main

import (
	"os"
	"slices"
	"syscall"
)

// allowedUIDs are the users whose NFS clients the server of store dir
// serves (nfsserver.Options.AllowUIDs): root, the store's owner and the
// user running the server.
func allowedUIDs(dir string) []uint32 {
	uids := []uint32{0, uint32(os.Geteuid())}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err == nil {
		uids = append(uids, st.Uid)
	}
	slices.Sort(uids)
	return slices.Compact(uids)
}

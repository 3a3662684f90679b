package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
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

// warnMounted warns, as the server stops, about the mounts NFS clients
// have not unmounted: those clients get errors or hang until the server is
// back.
func warnMounted(w io.Writer, mounts []string) {
	if len(mounts) == 0 {
		return
	}
	fmt.Fprintf(w, "branchnfs: warning: stopping while NFS clients have mounted %s: they get errors or hang until the server runs again (unmount first: branchnfs umount DIR)\n",
		strings.Join(mounts, ", "))
}

// Command mounthelper is the guest side of the kernel-client tests: a tiny
// static program (built with CGO_ENABLED=0) that the test's initramfs runs
// inside the qemu guest.
//
// Busybox's mount speaks the legacy binary NFS mount protocol, which modern
// kernels refuse, so the guest calls mount(2) itself with the text options
// that the kernel's NFS client parses; like mount(8), it turns nosuid,
// nodev, noexec, ro and noatime into mount(2) flags.
//
//	mounthelper mount SOURCE TARGET OPTIONS   mount(2) of type nfs
//	mounthelper runas UID GID CMD [ARG...]    drop to uid/gid, then exec CMD
//	mounthelper mmapwrite FILE SIZE           write FILE through mmap only; print its MD5
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mounthelper:", err)
		os.Exit(1)
	}
}

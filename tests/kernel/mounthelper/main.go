// Command mounthelper is the guest side of the kernel-client tests: a tiny
// static program (built with CGO_ENABLED=0) that the test's initramfs runs
// inside the qemu guest.
//
// Busybox's mount speaks the legacy binary NFS mount protocol, which modern
// kernels refuse, so the guest calls mount(2) itself with the text options
// that the kernel's NFS client parses.
//
//	mounthelper mount SOURCE TARGET OPTIONS   mount(2) of type nfs
//	mounthelper runas UID GID CMD [ARG...]    drop to uid/gid, then exec CMD
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mounthelper:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: mounthelper mount SOURCE TARGET OPTIONS | runas UID GID CMD [ARG...]")
	}
	switch args[0] {
	case "mount":
		if len(args) != 4 {
			return fmt.Errorf("usage: mounthelper mount SOURCE TARGET OPTIONS")
		}
		if err := unix.Mount(args[1], args[2], "nfs", 0, args[3]); err != nil {
			return fmt.Errorf("mount %s on %s: %w", args[1], args[2], err)
		}
		return nil
	case "runas":
		if len(args) < 4 {
			return fmt.Errorf("usage: mounthelper runas UID GID CMD [ARG...]")
		}
		uid, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("bad uid %q: %w", args[1], err)
		}
		gid, err := strconv.Atoi(args[2])
		if err != nil {
			return fmt.Errorf("bad gid %q: %w", args[2], err)
		}
		path, err := exec.LookPath(args[3])
		if err != nil {
			return err
		}
		// Order matters: groups and gid while still root, uid last.
		if err := syscall.Setgroups([]int{gid}); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setresgid(gid, gid, gid); err != nil {
			return fmt.Errorf("setresgid: %w", err)
		}
		if err := syscall.Setresuid(uid, uid, uid); err != nil {
			return fmt.Errorf("setresuid: %w", err)
		}
		return syscall.Exec(path, args[3:], os.Environ())
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}

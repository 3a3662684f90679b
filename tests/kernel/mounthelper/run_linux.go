package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

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

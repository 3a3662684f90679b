package main

import (
	"crypto/md5"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
		flags, data := mountFlags(args[3])
		if err := unix.Mount(args[1], args[2], "nfs", flags, data); err != nil {
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
	case "mmapwrite":
		if len(args) != 3 {
			return fmt.Errorf("usage: mounthelper mmapwrite FILE SIZE")
		}
		size, err := strconv.Atoi(args[2])
		if err != nil || size <= 0 {
			return fmt.Errorf("bad size %q", args[2])
		}
		return mmapWrite(args[1], size)
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// vfsFlags are the mount options that mount(8) turns into mount(2) flags
// instead of passing them to the file system (NFS's parser refuses them).
var vfsFlags = map[string]uintptr{
	"nosuid":  unix.MS_NOSUID,
	"nodev":   unix.MS_NODEV,
	"noexec":  unix.MS_NOEXEC,
	"ro":      unix.MS_RDONLY,
	"noatime": unix.MS_NOATIME,
}

// mountFlags splits comma-separated options into mount(2) flags and the
// text options left for the NFS client.
func mountFlags(opts string) (flags uintptr, data string) {
	var rest []string
	for _, o := range strings.Split(opts, ",") {
		if f, ok := vfsFlags[o]; ok {
			flags |= f
			continue
		}
		rest = append(rest, o)
	}
	return flags, strings.Join(rest, ",")
}

// mmapWrite fills a new file through a shared mapping, closing the file
// before it writes: close() then cannot flush the pages, which stay dirty
// in the page cache after the process exits, until writeback or a sync of
// the file system. It prints the MD5 of what it wrote.
func mmapWrite(path string, size int) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		return err
	}
	for i := range m {
		m[i] = byte(i*7 + i/4093)
	}
	fmt.Printf("%x\n", md5.Sum(m))
	return unix.Munmap(m)
}

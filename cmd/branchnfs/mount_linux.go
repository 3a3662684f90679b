package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// runMountCommand runs `mount -t nfs`, explaining the usual failures.
func runMountCommand(ctx context.Context, args []string, host string, port int, export, dir string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	var hint string
	switch {
	case os.Geteuid() != 0:
		hint = fmt.Sprintf("mount -t nfs needs root on Linux: run it with sudo, or add this line to /etc/fstab and run `mount %s` as yourself:\n  %s",
			dir, fstabLine(host, port, export, dir))
	case strings.Contains(msg, "No such device"):
		hint = "the kernel has no NFS client (try `modprobe nfs`; containers usually cannot mount NFS: use libnfs-utils' nfs-ls/nfs-cp instead)"
	case strings.Contains(msg, "bad option") || strings.Contains(msg, "helper program") || strings.Contains(msg, "unknown filesystem type"):
		hint = "this system has no NFS client: install nfs-common (Debian/Ubuntu) or nfs-utils (Fedora)"
	}
	if hint != "" {
		return fmt.Errorf("%w: `%s`: %s (%v)\n%s", errMountFailed, shellJoin(args), msg, err, hint)
	}
	return fmt.Errorf("%w: `%s`: %s (%v)", errMountFailed, shellJoin(args), msg, err)
}

// runUmountCommand runs umount.
func runUmountCommand(ctx context.Context, dir string, stderr io.Writer) error {
	out, err := exec.CommandContext(ctx, "umount", dir).CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if os.Geteuid() != 0 && !strings.Contains(msg, "not mounted") {
		return fmt.Errorf("%w: umount %s: %s (%v)\numount needs root unless /etc/fstab has a \"user\" entry for %s: run it with sudo",
			errMountFailed, dir, msg, err, dir)
	}
	return fmt.Errorf("%w: umount %s: %s (%v)", errMountFailed, dir, msg, err)
}

// mountRoot mounts the export / at dir: with mount -t nfs as root, else
// through an /etc/fstab "user" entry for dir (`mount DIR`).
func mountRoot(ctx context.Context, host string, port int, dir string) error {
	if os.Geteuid() == 0 {
		args, err := mountArgs("linux", host, port, "/", dir)
		if err != nil {
			return err
		}
		return runMountCommand(ctx, args, host, port, "/", dir)
	}
	out, err := exec.CommandContext(ctx, "mount", dir).CombinedOutput()
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: mount %s: %s (%v)\nas a regular user, Linux mounts NFS only through an /etc/fstab entry with \"user\"; add this line (as root) and restart serve:\n  %s",
		errMountFailed, dir, strings.TrimSpace(string(out)), err, fstabLine(host, port, "/", dir))
}

package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// runMountCommand runs /sbin/mount_nfs (no sudo; the user must own dir).
func runMountCommand(ctx context.Context, args []string, host string, port int, export, dir string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	hint := "check that the server runs (branchnfs serve), that you own " + dir +
		", and that it is not inside Documents, Desktop or Downloads (TCC)"
	return fmt.Errorf("%w: `%s`: %s (%v)\n%s", errMountFailed, shellJoin(args), msg, err, hint)
}

// runUmountCommand runs umount, then `diskutil unmount force` if that fails.
func runUmountCommand(ctx context.Context, dir string, stderr io.Writer) error {
	out, err := exec.CommandContext(ctx, "/sbin/umount", dir).CombinedOutput()
	if err == nil {
		return nil
	}
	fmt.Fprintf(stderr, "branchnfs: umount %s: %s (%v); trying diskutil unmount force\n", dir, strings.TrimSpace(string(out)), err)
	out, err = exec.CommandContext(ctx, "/usr/sbin/diskutil", "unmount", "force", dir).CombinedOutput()
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: diskutil unmount force %s: %s (%v)", errMountFailed, dir, strings.TrimSpace(string(out)), err)
}

// mountRoot mounts the export / at dir with mount_nfs, as the user.
func mountRoot(ctx context.Context, host string, port int, dir string) error {
	args, err := mountArgs("darwin", host, port, "/", dir)
	if err != nil {
		return err
	}
	return runMountCommand(ctx, args, host, port, "/", dir)
}

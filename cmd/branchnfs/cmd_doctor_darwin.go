package main

import (
	"errors"
	"os/exec"
)

// readMountTable returns the output of mount: macOS has no mountinfo.
func readMountTable() (string, error) {
	b, err := exec.Command("/sbin/mount").Output()
	return string(b), err
}

// congestionControl: macOS's TCP stack has no per-host choice to report.
func congestionControl() (string, error) {
	return "", errors.New("not applicable on macOS")
}

// canMount: mount_nfs works as the user on macOS.
func canMount() bool { return true }

// unescapeMountDir: mount's output on macOS is not escaped (mountinfo
// text, parsed only on Linux, never reaches it).
func unescapeMountDir(s string) string { return s }

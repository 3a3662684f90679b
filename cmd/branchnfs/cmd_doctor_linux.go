package main

import (
	"os"
	"os/exec"
	"strings"
)

// readMountTable returns /proc/self/mountinfo.
func readMountTable() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	return string(b), err
}

// congestionControl returns the host's default TCP congestion control.
func congestionControl() (string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	return strings.TrimSpace(string(b)), err
}

// canMount reports whether doctor can mount with the kernel's client:
// on Linux only root can, with mount.nfs installed.
func canMount() bool {
	if os.Geteuid() != 0 {
		return false
	}
	_, err := exec.LookPath("mount.nfs")
	return err == nil
}

// unescapeMountDir undoes mountinfo's octal escapes.
func unescapeMountDir(s string) string { return unescapeMount(s) }

package main

import (
	"os/exec"
	"strings"
)

// existingMounts lists NFS mounts of a loopback server: left over from an
// earlier run of the server, they reconnect to this one. macOS's mount
// output does not show the port, so every loopback NFS mount is listed.
func existingMounts(port int) []string {
	out, err := exec.Command("/sbin/mount", "-t", "nfs").Output()
	if err != nil {
		return nil
	}
	var res []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "127.0.0.1:") || strings.HasPrefix(line, "localhost:") {
			if i := strings.Index(line, " ("); i > 0 {
				line = line[:i]
			}
			res = append(res, line)
		}
	}
	return res
}

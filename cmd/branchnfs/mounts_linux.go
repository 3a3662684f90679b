package main

import (
	"os"
	"strconv"
	"strings"
)

// existingMounts lists NFS mounts of a loopback server on port: left over
// from an earlier run of the server, they reconnect to this one.
func existingMounts(port int) []string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	return parseProcMounts(string(b), port)
}

// parseProcMounts finds NFS mounts from 127.0.0.1 or localhost with
// port=P in /proc/self/mounts text.
func parseProcMounts(text string, port int) []string {
	var out []string
	p := "port=" + strconv.Itoa(port)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "nfs" && f[2] != "nfs4") {
			continue
		}
		if !strings.HasPrefix(f[0], "127.0.0.1:") && !strings.HasPrefix(f[0], "localhost:") && !strings.HasPrefix(f[0], "[::1]:") {
			continue
		}
		for _, o := range strings.Split(f[3], ",") {
			if o == p {
				out = append(out, f[0]+" on "+unescapeMount(f[1]))
				break
			}
		}
	}
	return out
}

// unescapeMount undoes the octal escapes of /proc/self/mounts (\040 for a
// space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

//go:build !linux

package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// stoppedThreads reports whether process pid is stopped (ps's state T):
// 0 when it is, 1 when it still runs.
func stoppedThreads(pid int) (running int, err error) {
	out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return 0, fmt.Errorf("ps of process %d: %w", pid, err)
	}
	if strings.HasPrefix(strings.TrimSpace(string(out)), "T") {
		return 0, nil
	}
	return 1, nil
}

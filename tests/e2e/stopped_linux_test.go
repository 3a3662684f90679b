package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// stoppedThreads reports whether every thread of process pid is stopped
// (state T in /proc/PID/task/TID/stat), and how many are not yet. kill
// returns once SIGSTOP is queued: the threads stop only when each is next
// scheduled, so on a busy machine the process may still run for a while,
// and answer a request sent meanwhile.
func stoppedThreads(pid int) (running int, err error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return 0, fmt.Errorf("the threads of process %d: none in /proc (%v)", pid, err)
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("%s: unexpected %q", p, b)
		}
		if s := b[i+2]; s != 'T' && s != 't' {
			running++
		}
	}
	return running, nil
}

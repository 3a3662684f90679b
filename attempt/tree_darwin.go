package attempt

import (
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tree is the helper's view of the attempt's processes on macOS: only the
// process group. macOS has no cgroups and no child subreaper, so a process
// that leaves the group (setsid) is neither signalled nor waited for.
type tree struct {
	pgid      int
	groupGone atomic.Bool // the group was found empty: never signal it again
}

const darwinFallback = "macOS has no cgroups and no subreaper: the tree is held by its process group only, and a process that calls setsid leaves it"

func newTree(noCgroup bool) (*tree, error) { return &tree{}, nil }

func (t *tree) start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	t.pgid = cmd.Process.Pid
	return nil
}

func (t *tree) info(leader int) Info {
	return Info{PID: leader, PGID: t.pgid, Isolation: "process-group", Fallback: darwinFallback}
}

func (t *tree) signal(sig syscall.Signal) {
	t.signalGroup(sig)
}

func (t *tree) kill() { t.signal(syscall.SIGKILL) }

// reap waits for the leader, the helper's only child.
func (t *tree) reap(leader int) (Status, bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(leader, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid != leader {
			return Status{}, false
		}
		return statusOf(ws), true
	}
}

// waitGone waits until the process group is empty.
func (t *tree) waitGone() {
	for t.pgid > 0 && unix.Kill(-t.pgid, 0) != syscall.ESRCH {
		time.Sleep(5 * time.Millisecond)
	}
}

func (t *tree) cleanup() {}

// holdOrphans does nothing on macOS, which has no child subreaper: what a
// dead helper leaves outside the process group is re-parented to launchd,
// out of the supervisor's reach.
func holdOrphans() error { return nil }

// killOrphans ends what a dead helper left of its tree, from the
// supervisor: its process group, then every process still in the tree's
// session (whose id is the leader's pid: the helper started it with
// setsid), found by listing the processes, which catches those that made
// a process group of their own (job control). A process of the tree that
// left the session too (setsid) and outlived the helper is not found:
// macOS has no subreaper, and such a process is re-parented to launchd.
// The caller fences the branch, so that it can no longer change it.
func killOrphans(in Info) (int, error) {
	if in.PGID > 0 {
		unix.Kill(-in.PGID, syscall.SIGKILL)
	}
	if in.PID <= 0 {
		return 0, nil
	}
	self := os.Getpid()
	seen := map[int]bool{}
	for round := 0; round < 50; round++ {
		ps, err := unix.SysctlKinfoProcSlice("kern.proc.all")
		if err != nil {
			return len(seen), fmt.Errorf("list processes: %w", err)
		}
		found := false
		for _, p := range ps {
			pid := int(p.Proc.P_pid)
			if pid <= 1 || pid == self || p.Proc.P_stat == sZomb {
				continue
			}
			if sid, err := unix.Getsid(pid); err == nil && sid == in.PID {
				seen[pid], found = true, true
				unix.Kill(pid, syscall.SIGKILL)
			}
		}
		if !found {
			return len(seen), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return len(seen), fmt.Errorf("processes of session %d still run after SIGKILL", in.PID)
}

// sZomb is the state of a zombie process in kinfo_proc (SZOMB, xnu's
// bsd/sys/proc.h).
const sZomb = 5

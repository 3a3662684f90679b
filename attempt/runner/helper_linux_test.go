package runner_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

// An attempt that kills its own helper, leaves a daemon in a session of
// its own and exits 0 does not outlive its job: the daemon is gone when
// Exec returns, the record says the tree was killed and why, and the
// branch is fenced (aborted) although on-exit says keep. Run as a user
// who is not root, so without a delegated cgroup.
func TestExecHelperKilledByTree(t *testing.T) {
	testbin.PassesUnprivileged(t, "TestExecHelperKilledByTree", "TestExecHelperKilledByTree", func(t *testing.T) {
		o, m, root := setup(t)
		fork(t, m, "b")
		pidFile := filepath.Join(root, "pid")
		script := `setsid sh -c 'echo $$ > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; exec sleep 1000' & ` +
			`while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done; kill -9 $PPID; exit 0`
		rec, err := runner.Exec(context.Background(), o, "b", runner.OnExitKeep, sh(script))
		if err != nil {
			t.Fatal(err)
		}
		pid := readPID(t, pidFile)
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the daemon %d outlived its job; record %+v", pid, rec)
		}
		if rec.KilledBy != runner.KilledByHelperDied || !errors.Is(rec.Err(), attempt.ErrHelperDied) {
			t.Fatalf("record %+v (err %v): want killed_by %s and the helper's death as its error", rec, rec.Err(), runner.KilledByHelperDied)
		}
		if rec.State != branches.StateAborted {
			t.Fatalf("record state %s, want aborted", rec.State)
		}
		if in, err := m.Get(context.Background(), "b"); !errors.Is(err, branches.ErrNotFound) && in.State != branches.StateAborted {
			t.Fatalf("branch %s (%v) after its helper was killed, want aborted (fenced)", in.State, err)
		}
	})
}

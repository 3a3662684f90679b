package attempt_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

// KillHelperScript is a command that leaves a daemon (sleep, in a session
// of its own, its pid written to pidFile) and then kills its own helper,
// as any process of the tree may (same uid), and exits 0.
func KillHelperScript(pidFile string) string {
	return `setsid sh -c 'echo $$ > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; exec sleep 1000' & ` +
		`while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done; kill -9 $PPID; exit 0`
}

// ReadPIDFile waits for pidFile and returns the pid it holds.
func ReadPIDFile(t *testing.T, pidFile string) int {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never written", pidFile)
	return 0
}

// A tree that kills its own helper and leaves a daemon in another session
// ends with the attempt: the supervisor, a child subreaper, adopts the
// daemon when the helper dies and kills it before Done, and Err says the
// helper died. Run as a user who is not root, without a cgroup.
func TestHelperKilledLeavesNoSurvivor(t *testing.T) {
	testbin.PassesUnprivileged(t, "TestHelperKilledLeavesNoSurvivor", "TestHelperKilledLeavesNoSurvivor", func(t *testing.T) {
		dir := t.TempDir()
		pidFile := filepath.Join(dir, "pid")
		a, err := attempt.Start(attempt.Options{Argv: []string{"/bin/sh", "-c", KillHelperScript(pidFile)}, Dir: dir, NoCgroup: true})
		if err != nil {
			t.Fatal(err)
		}
		if in := a.Info(); in.Isolation != "subreaper" {
			t.Fatalf("isolation %q, want subreaper", in.Isolation)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = a.Wait(ctx)
		pid := ReadPIDFile(t, pidFile)
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the daemon %d (setsid sleep) outlived the attempt that killed its helper (err %v)", pid, err)
		}
		if !errors.Is(err, attempt.ErrHelperDied) {
			t.Fatalf("Wait: %v, want ErrHelperDied", err)
		}
		if st := a.Status(); st.Success() {
			t.Fatalf("status %+v: success for a tree whose helper died", st)
		}
	})
}

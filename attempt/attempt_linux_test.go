package attempt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Without files, the command's standard files are /dev/null, never closed
// descriptors that a file the helper opens could take over.
func TestDefaultFilesAreDevNull(t *testing.T) {
	dir := t.TempDir()
	a := start(t, `x0=$(readlink /proc/$$/fd/0); x1=$(readlink /proc/$$/fd/1); x2=$(readlink /proc/$$/fd/2); echo "$x0 $x1 $x2" > out`, Options{Dir: dir})
	wait(t, a)
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "/dev/null /dev/null /dev/null\n" {
		t.Fatalf("fds 0-2 of the command: %q", got)
	}
}

// A command that kills its own helper must neither keep the supervisor
// waiting nor leave processes running: the helper's pipes are not
// inherited, and the supervisor ends what the dead helper left.
func TestCommandKillsItsHelper(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	a := start(t, `sleep 60 & echo $! > `+pidFile+`; for fd in 3 4 5; do readlink /proc/$$/fd/$fd; done > fds; kill -9 $PPID; wait`, Options{Dir: dir})
	pid := readPID(t, pidFile)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the supervisor still waits 30 s after the command killed its helper")
	}
	if a.Err() == nil {
		t.Fatal("no error for a helper that died before the tree was gone")
	}
	for i := 0; alive(pid); i++ {
		if i > 500 {
			t.Fatalf("the command's child %d survived its helper", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(dir, "fds"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "pipe:") {
		t.Fatalf("the command inherited the helper's pipes as fds 3-5: %q", b)
	}
}

// Once the tree's process group is found empty it is never signalled
// again: its number may be reused by an unrelated group leader.
func TestEmptyGroupNotSignalledAgain(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	tr := &tree{pgid: cmd.Process.Pid}
	tr.signalGroup(syscall.SIGKILL)
	if !tr.groupGone.Load() {
		t.Fatal("the empty group was not noticed")
	}
	// A live group is signalled and stays marked live.
	live := exec.Command("/bin/sleep", "60")
	live.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	tr = &tree{pgid: live.Process.Pid}
	tr.signalGroup(syscall.SIGKILL)
	live.Wait()
	if tr.groupGone.Load() {
		t.Fatal("a live group was taken for empty")
	}
	if live.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the live group was not signalled: %v", live.ProcessState)
	}
}

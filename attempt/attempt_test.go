package attempt

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
)

func TestMain(m *testing.M) {
	RunHelper()
	os.Exit(m.Run())
}

func start(t *testing.T, script string, opts Options) *Attempt {
	t.Helper()
	opts.Argv = []string{"/bin/sh", "-c", script}
	a, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a.End(ctx, 0)
	})
	return a
}

func wait(t *testing.T, a *Attempt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// readPID waits for a script to write its pid to path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
	return 0
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// leave sets $S to setsid(1) where there is one (Linux), so that "$S sh"
// leaves the session; macOS has none, and there the process stays in the
// group (a process that leaves it escapes supervision on macOS).
const leave = `S=$(command -v setsid); `

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		want   Status
		code   int
	}{
		{"zero", "exit 0", Status{Code: 0}, 0},
		{"seven", "exit 7", Status{Code: 7}, 7},
		{"sigterm", "kill -TERM $$", Status{Code: -1, Signal: 15}, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := start(t, tc.script, Options{})
			wait(t, a)
			if got := a.Status(); got != tc.want || got.ExitCode() != tc.code {
				t.Fatalf("status %+v (exit code %d), want %+v (%d)", got, got.ExitCode(), tc.want, tc.code)
			}
		})
	}
}

func TestStartFailure(t *testing.T) {
	_, err := Start(Options{Argv: []string{"/nonexistent/branchnfs-no-such-command"}})
	if !errors.Is(err, ErrStart) {
		t.Fatalf("err = %v, want ErrStart", err)
	}
}

func TestInfo(t *testing.T) {
	a := start(t, "exit 0", Options{})
	in := a.Info()
	if in.PID <= 0 || in.PGID != in.PID {
		t.Fatalf("info %+v: want the leader to lead its own group", in)
	}
	switch in.Isolation {
	case "cgroup":
		if in.Cgroup == "" {
			t.Fatalf("info %+v: cgroup isolation without a cgroup", in)
		}
	case "subreaper", "process-group":
		if in.Fallback == "" {
			t.Fatalf("info %+v: no cgroup and no reason given", in)
		}
	default:
		t.Fatalf("info %+v: unknown isolation", in)
	}
	wait(t, a)
}

// A grandchild that double-forks, leaves the session and ignores SIGTERM
// is still killed, and End returns only once it is gone: with the cgroup
// where there is one, and with the subreaper alone.
func TestEndKillsEscapedGrandchild(t *testing.T) {
	t.Run("default", func(t *testing.T) { testEndKillsEscapedGrandchild(t, false) })
	t.Run("no-cgroup", func(t *testing.T) { testEndKillsEscapedGrandchild(t, true) })
}

func testEndKillsEscapedGrandchild(t *testing.T, noCgroup bool) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	out := filepath.Join(dir, "out")
	script := leave + `( $S sh -c 'trap "" TERM; echo $$ > ` + pidFile + `; while :; do echo x >> ` + out + `; sleep 0.01; done' & ) ; sleep 1000`
	a := start(t, script, Options{NoCgroup: noCgroup})
	if in := a.Info(); noCgroup && in.Isolation == "cgroup" {
		t.Fatalf("info %+v with NoCgroup", in)
	}
	pid := readPID(t, pidFile)
	if !alive(pid) {
		t.Fatalf("grandchild %d not running", pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	killed, err := a.End(ctx, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !killed {
		t.Fatal("End did not need SIGKILL for a grandchild that ignores SIGTERM")
	}
	if alive(pid) {
		t.Fatalf("grandchild %d still alive after End", pid)
	}
	st, _ := os.Stat(out)
	time.Sleep(50 * time.Millisecond)
	st2, _ := os.Stat(out)
	if st.Size() != st2.Size() {
		t.Fatalf("%s still grows after End (%d then %d bytes)", out, st.Size(), st2.Size())
	}
	if got := a.Status(); got.Signal != int(syscall.SIGTERM) {
		t.Fatalf("leader status %+v, want killed by SIGTERM", got)
	}
}

// After the leader exits 0, a daemon it left keeps the tree alive until
// it is ended.
func TestLeaderExitLeavesTree(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	a := start(t, leave+`( $S sh -c 'echo $$ > `+pidFile+`; exec sleep 1000' & ) ; exit 0`, Options{})
	<-a.Exited()
	if st := a.Status(); !st.Success() {
		t.Fatalf("leader status %+v, want success", st)
	}
	pid := readPID(t, pidFile)
	select {
	case <-a.Done():
		t.Fatalf("Done closed while daemon %d (sleep 1000) runs", pid)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.End(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("daemon %d alive after End", pid)
	}
}

// When the supervisor goes away (here: Close), the helper ends the tree.
func TestOrphanedTreeIsEnded(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	a := start(t, leave+`( $S sh -c 'trap "" TERM; echo $$ > `+pidFile+`; while :; do sleep 0.01; done' & ) ; sleep 1000`, Options{Grace: 10 * time.Millisecond})
	pid := readPID(t, pidFile)
	a.Close()
	wait(t, a)
	if alive(pid) {
		t.Fatalf("grandchild %d alive after its supervisor let go", pid)
	}
}

func TestScore(t *testing.T) {
	a := start(t, `echo 0.75 >&3; (sleep 0.05; echo more >&3) &`, Options{Score: true})
	wait(t, a)
	if got := string(a.Score()); got != "0.75\nmore\n" {
		t.Fatalf("score %q, want what the whole tree wrote", got)
	}
}

func TestDirAndEnv(t *testing.T) {
	dir := t.TempDir()
	a := start(t, `pwd > out; echo "$X" >> out`, Options{Dir: dir, Env: append(os.Environ(), "X=hello")})
	wait(t, a)
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if got := string(b); got != real+"\nhello\n" && got != dir+"\nhello\n" {
		t.Fatalf("out = %q", got)
	}
}

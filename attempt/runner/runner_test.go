package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

func TestMain(m *testing.M) {
	attempt.RunHelper()
	os.Exit(m.Run())
}

// setup returns runner options over a fresh store whose attempts run in
// plain directories ROOT/BRANCH (no NFS here: the tests check processes
// and the lifecycle decisions, not fencing through a mount).
func setup(t *testing.T) (runner.Options, *branches.Manager, string) {
	t.Helper()
	st, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(context.Background(), branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	root := t.TempDir()
	o := runner.Options{
		Backend: m,
		Workdir: func(b string) (string, error) {
			d := filepath.Join(root, b)
			return d, os.MkdirAll(d, 0o755)
		},
		Flush:  func(string) error { return nil },
		Grace:  50 * time.Millisecond,
		Poll:   10 * time.Millisecond,
		LogDir: t.TempDir(),
	}
	return o, m, root
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func state(t *testing.T, m *branches.Manager, name string) branches.State {
	t.Helper()
	in, err := m.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return in.State
}

func fork(t *testing.T, m *branches.Manager, name string) {
	t.Helper()
	if _, err := m.Fork(context.Background(), branches.MainBranch, name); err != nil {
		t.Fatal(err)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
	return 0
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// leave sets $S to setsid(1) where there is one (Linux); see the attempt
// package's tests.
const leave = `S=$(command -v setsid); `

// escapee is a script whose grandchild leaves the session, ignores
// SIGTERM and writes its pid to pidFile; the leader then sleeps.
func escapee(pidFile string) string {
	return leave + `( $S sh -c 'trap "" TERM; echo $$ > ` + pidFile + `; while :; do sleep 0.01; done' & ) ; sleep 1000`
}

func TestExecOnExit(t *testing.T) {
	for _, tc := range []struct {
		name, onExit, script string
		code                 int
		want                 branches.State
	}{
		{"commit-success", runner.OnExitCommit, "echo hi > f", 0, branches.StateCommitted},
		{"commit-failure", runner.OnExitCommit, "exit 3", 3, branches.StateAborted},
		{"abort", runner.OnExitAbort, "exit 0", 0, branches.StateAborted},
		{"keep", runner.OnExitKeep, "exit 5", 5, branches.StateLive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, m, _ := setup(t)
			fork(t, m, "b")
			rec, err := runner.Exec(context.Background(), o, "b", tc.onExit, sh(tc.script))
			if err != nil {
				t.Fatal(err)
			}
			if rec.ExitStatus() != tc.code || rec.State != tc.want || rec.Err() != nil {
				t.Fatalf("record %+v, want exit %d state %s", rec, tc.code, tc.want)
			}
			if tc.want == branches.StateLive {
				if got := state(t, m, "b"); got != tc.want {
					t.Fatalf("branch state %s, want %s", got, tc.want)
				}
			}
		})
	}
}

// While exec runs, its branch holds a lease that the runner renews; it
// survives lease sweeps, and is gone once exec lets the branch go.
func TestExecLease(t *testing.T) {
	o, m, root := setup(t)
	// Long enough that a busy machine renews it in time (the runner renews
	// every third of it); the test waits for renewals, not for a period.
	o.Lease = 3 * time.Second
	fork(t, m, "b")
	done := filepath.Join(root, "done")
	go func() {
		defer os.WriteFile(done, nil, 0o644)
		// Sweep until the lease was renewed twice: each sweep at the time
		// it runs, so an unrenewed lease would be swept.
		var seen []time.Time
		for deadline := time.Now().Add(2 * time.Minute); len(seen) < 3 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			if _, err := m.ExpireLeases(context.Background(), time.Now()); err != nil {
				t.Error(err)
				return
			}
			metas, err := m.Metas(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			if exp := metas["b"].LeaseExpires; exp != nil && (len(seen) == 0 || exp.After(seen[len(seen)-1])) {
				seen = append(seen, *exp)
			}
		}
		if len(seen) < 3 {
			t.Errorf("the lease was renewed %d times in 2 minutes, want 2", max(len(seen)-1, 0))
		}
	}()
	rec, err := runner.Exec(context.Background(), o, "b", runner.OnExitKeep, sh("while [ ! -e "+done+" ]; do sleep 0.02; done"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != branches.StateLive || rec.KilledBy != "" {
		t.Fatalf("record %+v: the renewed lease must keep the branch live", rec)
	}
	metas, _ := m.Metas(context.Background())
	if md := metas["b"]; md.LeaseExpires != nil || md.Labels["attempt"] != rec.Attempt {
		t.Fatalf("meta after exec: %+v: want the attempt label and no lease", md)
	}
}

func TestExecEnv(t *testing.T) {
	o, m, root := setup(t)
	o.Store = "/the/store"
	fork(t, m, "b")
	rec, err := runner.Exec(context.Background(), o, "b", runner.OnExitKeep,
		sh(`echo "$BRANCHNFS_BRANCH $BRANCHNFS_PARENT $BRANCHNFS_ATTEMPT $BRANCHNFS_STORE" > env; pwd >> env`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "b", "env"))
	if err != nil {
		t.Fatal(err)
	}
	want := "b main " + rec.Attempt + " /the/store\n" + filepath.Join(root, "b") + "\n"
	if string(b) != want || len(rec.Attempt) != 8 {
		t.Fatalf("env file %q, want %q", b, want)
	}
}

func TestExecTimeoutFencesAndKills(t *testing.T) {
	o, m, root := setup(t)
	// Long enough for the grandchild to start on a loaded machine; if the
	// timeout still comes first, nothing escaped and there is no pid.
	o.Timeout = 2 * time.Second
	fork(t, m, "b")
	pidFile := filepath.Join(root, "pid")
	rec, err := runner.Exec(context.Background(), o, "b", runner.OnExitKeep, sh(escapee(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if alive(pid) {
			t.Fatalf("grandchild %d alive after the timeout", pid)
		}
	} else {
		t.Logf("the timeout came before the grandchild wrote its pid")
	}
	if rec.KilledBy != runner.KilledByTimeout || rec.State != branches.StateAborted || rec.ExitStatus() != 128+15 || rec.Outcome != runner.OutcomeTimedOut {
		t.Fatalf("record %+v: want killed by timeout, branch aborted (fenced), exit 143", rec)
	}
	if _, err := m.Get(context.Background(), "b"); err == nil {
		t.Fatal("branch b still listed after the fence")
	}
}

func TestExecInterrupt(t *testing.T) {
	o, m, root := setup(t)
	fork(t, m, "b")
	ctx, cancel := context.WithCancel(context.Background())
	pidFile := filepath.Join(root, "pid")
	go func() { readPID(t, pidFile); cancel() }()
	rec, err := runner.Exec(ctx, o, "b", runner.OnExitCommit, sh(escapee(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	if rec.KilledBy != runner.KilledByInterrupt || rec.State != branches.StateAborted {
		t.Fatalf("record %+v: want killed by interrupt, aborted", rec)
	}
	if pid := readPID(t, pidFile); alive(pid) {
		t.Fatalf("grandchild %d alive", pid)
	}
}

// A branch aborted from elsewhere ends its attempt.
func TestExecBranchAbortedElsewhere(t *testing.T) {
	o, m, root := setup(t)
	fork(t, m, "b")
	pidFile := filepath.Join(root, "pid")
	go func() {
		readPID(t, pidFile)
		m.Abort(context.Background(), "b")
	}()
	rec, err := runner.Exec(context.Background(), o, "b", runner.OnExitCommit, sh(escapee(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	if rec.KilledBy != runner.KilledByBranch {
		t.Fatalf("record %+v: want killed_by %s", rec, runner.KilledByBranch)
	}
	if pid := readPID(t, pidFile); alive(pid) {
		t.Fatalf("grandchild %d alive", pid)
	}
}

func TestExecRefusesStaleAndRoot(t *testing.T) {
	o, m, _ := setup(t)
	fork(t, m, "b")
	m.Abort(context.Background(), "b")
	if _, err := runner.Exec(context.Background(), o, "b", runner.OnExitCommit, sh("true")); err == nil {
		t.Fatal("exec in an aborted branch succeeded")
	}
	if _, err := runner.Exec(context.Background(), o, "main", runner.OnExitCommit, sh("true")); err == nil {
		t.Fatal("exec --on-exit commit in main succeeded")
	}
}

func TestRaceFirstSuccessWins(t *testing.T) {
	o, m, root := setup(t)
	// Each branch gets a file of its own, as an attempt writing through a
	// mount would: the commit then has a change to report.
	workdir := o.Workdir
	o.Workdir = func(b string) (string, error) {
		v, _, err := m.View(b)
		if err != nil {
			return "", err
		}
		if _, err := v.Create(cowfs.RootIno, "out", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0); err != nil {
			return "", err
		}
		return workdir(b)
	}
	pid0 := filepath.Join(root, "pid0")
	pid2 := filepath.Join(root, "pid2")
	// The slow loser must be running when the winner commits: the winner
	// waits for the loser's grandchild to exist.
	recs, err := runner.Race(context.Background(), o, runner.RaceSpec{
		Parent: "main",
		Cmds: [][]string{
			sh(escapee(pid0)),
			sh(`while [ ! -s ` + pid0 + ` ] || [ ! -s ` + pid2 + ` ] || kill -0 $(cat ` + pid2 + `) 2>/dev/null; do sleep 0.01; done; echo win > f`),
			sh("echo $$ > " + pid2 + "; exit 1"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if recs[1].State != branches.StateCommitted || recs[1].Diff == nil {
		t.Fatalf("attempt 1: %+v, want committed with a diff", recs[1])
	}
	if recs[0].State != branches.StateAborted || recs[0].KilledBy != runner.KilledBySibling {
		t.Fatalf("attempt 0: %+v, want killed by its sibling, aborted", recs[0])
	}
	if recs[2].State != branches.StateAborted || recs[2].ExitCode != 1 || recs[2].KilledBy != "" {
		t.Fatalf("attempt 2: %+v, want exit 1, aborted, not killed", recs[2])
	}
	for i, want := range []string{runner.OutcomeLost, runner.OutcomeWon, runner.OutcomeFailed} {
		if recs[i].Outcome != want {
			t.Errorf("attempt %d: outcome %q, want %q", i, recs[i].Outcome, want)
		}
	}
	// The fast-path commit reports what it brought in, not 0.
	if c := recs[1].Commit; c == nil || !c.FastPath || c.Changes != 1 {
		t.Errorf("winner's commit %+v, want the fast path with 1 change", c)
	}
	if pid := readPID(t, pid0); alive(pid) {
		t.Fatalf("loser's grandchild %d alive after the race", pid)
	}
	for _, r := range recs {
		if r.Parent != "main" || !strings.HasPrefix(r.Branch, "main-"+r.Attempt+"-") {
			t.Fatalf("record %+v: bad names", r)
		}
	}
}

func TestRaceCheck(t *testing.T) {
	o, _, _ := setup(t)
	// Both exit 0; only the one that wrote "good" passes the check.
	recs, err := runner.Race(context.Background(), o, runner.RaceSpec{
		Parent: "main",
		Cmds:   [][]string{sh("echo bad > out"), sh("sleep 0.2; echo good > out")},
		Check:  sh(`grep -q good out`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].State != branches.StateAborted || recs[0].Check == nil || *recs[0].Check == 0 {
		t.Fatalf("attempt 0: %+v, want a failed check, aborted", recs[0])
	}
	if recs[1].State != branches.StateCommitted || recs[1].Check == nil || *recs[1].Check != 0 {
		t.Fatalf("attempt 1: %+v, want a passed check, committed", recs[1])
	}
	if recs[0].Outcome != runner.OutcomeCheckFailed || recs[1].Outcome != runner.OutcomeWon {
		t.Fatalf("outcomes %q, %q: want check_failed, won", recs[0].Outcome, recs[1].Outcome)
	}
}

// A loser that exits 0 on its own while the winner commits is not killed
// and has exit code 0: its outcome says it lost.
func TestRaceLoserExitedOnItsOwn(t *testing.T) {
	o, _, root := setup(t)
	gate := filepath.Join(root, "gate")
	recs, err := runner.Race(context.Background(), o, runner.RaceSpec{
		Parent: "main",
		// Attempt 1 waits for attempt 0 to start its exit, then exits too:
		// by the time the race handles it, attempt 0 has won.
		Cmds:  [][]string{sh("echo a > f; touch " + gate), sh("while [ ! -e " + gate + " ]; do sleep 0.01; done; exit 0")},
		Check: sh("sleep 0.3"),
	})
	if err != nil {
		t.Fatal(err)
	}
	won := 0
	for _, r := range recs {
		switch r.Outcome {
		case runner.OutcomeWon:
			won++
		case runner.OutcomeLost:
			if r.ExitCode != 0 {
				t.Errorf("loser %+v: want exit 0", r)
			}
		default:
			t.Errorf("attempt %s: outcome %q, want won or lost", r.Branch, r.Outcome)
		}
	}
	if won != 1 {
		t.Fatalf("%d winners: %+v", won, recs)
	}
}

func TestRaceTimeout(t *testing.T) {
	o, m, _ := setup(t)
	o.Timeout = 100 * time.Millisecond
	recs, err := runner.Race(context.Background(), o, runner.RaceSpec{Parent: "main", Cmds: [][]string{sh("sleep 1000"), sh("sleep 1000")}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.KilledBy != runner.KilledByTimeout || r.State != branches.StateAborted || r.Outcome != runner.OutcomeTimedOut {
			t.Fatalf("attempt %d: %+v, want killed by timeout, aborted, timed_out", i, r)
		}
	}
	infos, _ := m.List(context.Background())
	for _, in := range infos {
		if in.State == branches.StateLive && in.Name != "main" {
			t.Fatalf("branch %s left live", in.Name)
		}
	}
}

func TestBestOf(t *testing.T) {
	// The score derives from the attempt's branch name (PARENT-ID-I).
	score := `case "$BRANCHNFS_BRANCH" in *-0) s=1;; *-1) s=3;; *) s=2;; esac; echo $s > s; echo "$s" >&3`
	t.Run("fd3", func(t *testing.T) {
		o, _, _ := setup(t)
		recs, err := runner.BestOf(context.Background(), o, runner.BestOfSpec{Parent: "main", N: 3, Argv: sh(score)})
		if err != nil {
			t.Fatal(err)
		}
		want := []branches.State{branches.StateAborted, branches.StateCommitted, branches.StateAborted}
		for i, r := range recs {
			if r.State != want[i] || r.Score == nil {
				t.Fatalf("attempt %d: %+v, want %s with a score", i, r, want[i])
			}
		}
		if *recs[1].Score != 3 {
			t.Fatalf("score %v, want 3", *recs[1].Score)
		}
		if recs[0].Outcome != runner.OutcomeLost || recs[1].Outcome != runner.OutcomeWon {
			t.Fatalf("outcomes %q, %q: want lost, won", recs[0].Outcome, recs[1].Outcome)
		}
	})
	t.Run("score-cmd-keep", func(t *testing.T) {
		o, m, _ := setup(t)
		recs, err := runner.BestOf(context.Background(), o, runner.BestOfSpec{
			Parent: "main", N: 3, Argv: sh(strings.TrimSuffix(score, `; echo "$s" >&3`)), ScoreCmd: sh("echo score; cat s"), Keep: 2})
		if err != nil {
			t.Fatal(err)
		}
		want := []branches.State{branches.StateAborted, branches.StateLive, branches.StateLive}
		for i, r := range recs {
			if r.State != want[i] {
				t.Fatalf("attempt %d: %+v, want %s", i, r, want[i])
			}
			if r.State == branches.StateLive {
				if got := state(t, m, r.Branch); got != branches.StateLive {
					t.Fatalf("branch %s is %s", r.Branch, got)
				}
			}
		}
		// The kept branches carry their score and labels, and no lease: the
		// runner let go of them.
		metas, err := m.Metas(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs[1:] {
			md := metas[r.Branch]
			if md.Score == nil || *md.Score != *r.Score || md.LeaseExpires != nil || md.Labels["runner"] != "best-of" || md.Labels["attempt"] != r.Attempt {
				t.Fatalf("meta of kept %s: %+v", r.Branch, md)
			}
		}
	})
	t.Run("no-commit-timeout", func(t *testing.T) {
		o, _, _ := setup(t)
		o.Timeout = 200 * time.Millisecond
		recs, err := runner.BestOf(context.Background(), o, runner.BestOfSpec{
			Parent: "main", N: 2, Argv: sh(`case "$BRANCHNFS_BRANCH" in *-0) sleep 1000;; esac; echo 1 >&3`), NoCommit: true})
		if err != nil {
			t.Fatal(err)
		}
		if recs[0].KilledBy != runner.KilledByTimeout || recs[0].Score != nil {
			t.Fatalf("attempt 0: %+v, want killed by timeout, no score", recs[0])
		}
		if recs[1].State != branches.StateAborted || recs[1].Score == nil || *recs[1].Score != 1 {
			t.Fatalf("attempt 1: %+v, want scored 1 and aborted (no commit)", recs[1])
		}
	})
}

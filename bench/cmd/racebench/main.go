// Command racebench measures races of supervised attempts (scripts/bench-race):
// how long after the winner's commit every loser process is gone, and how
// many loser writes landed after that commit; with -start, how long a race
// takes from its start to every attempt's command running.
//
// It serves a fresh store over NFS on a loopback port in-process and runs
// races with the runner the CLI and the jobs API use. Each loser is a tree
// that forks grandchildren (one leaves the session) which write new files
// into the loser's branch through NFS (nfs-cp, from libnfs-utils) in a loop,
// logging each write's start time and outcome. The winner exits 0 once
// every loser has landed a write. A loser write that started after the
// commit and succeeded "landed after the commit".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/nfsserver"
)

func main() {
	attempt.RunHelper()
	races := flag.Int("races", 50, "number of races")
	n := flag.Int("n", 4, "attempts per race (one winner)")
	grace := flag.Duration("grace", 100*time.Millisecond, "SIGTERM to SIGKILL")
	stubborn := flag.Bool("stubborn", false, "the setsid grandchild of each loser ignores SIGTERM (then only SIGKILL, after the grace, ends it)")
	start := flag.Bool("start", false, "measure instead how long a race takes from its start to every attempt's command running")
	flag.Parse()
	if *start {
		if err := runStart(*races, *n); err != nil {
			fmt.Fprintln(os.Stderr, "racebench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*races, *n, *grace, *stubborn); err != nil {
		fmt.Fprintln(os.Stderr, "racebench:", err)
		os.Exit(1)
	}
}

func run(races, n int, grace time.Duration, stubborn bool) error {
	if _, err := exec.LookPath("nfs-cp"); err != nil {
		return fmt.Errorf("nfs-cp not found: apt-get install libnfs-utils")
	}
	tmp, err := os.MkdirTemp("", "racebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	mgr, closeStore, err := openStore(ctx, tmp, quiet)
	if err != nil {
		return err
	}
	defer closeStore()
	srv, err := nfsserver.New(nfsserver.Options{Branches: mgr, Logger: quiet})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Serve(sctx, ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	work := filepath.Join(tmp, "work")
	var (
		mu        sync.Mutex
		committed time.Time
		ended     = map[string]time.Time{}
	)
	o := runner.Options{
		Backend: mgr, Store: tmp, Grace: grace, Timeout: 2 * time.Minute, Logger: quiet,
		Workdir: func(b string) (string, error) {
			d := filepath.Join(work, b)
			return d, os.MkdirAll(d, 0o755)
		},
		Flush: func(string) error { return nil }, // the attempts write through NFS themselves
		Events: func(ev runner.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch ev.Kind {
			case "committed":
				committed = ev.Time
			case "ended":
				ended[ev.Branch] = ev.Time
			}
		},
	}
	var lat []time.Duration
	landedAfter, refusedAfter, writesBefore := 0, 0, 0
	for i := 0; i < races; i++ {
		parent := fmt.Sprintf("p%d", i)
		if _, err := mgr.Fork(ctx, branches.MainBranch, parent); err != nil {
			return err
		}
		mu.Lock()
		committed, ended = time.Time{}, map[string]time.Time{}
		mu.Unlock()
		flag := filepath.Join(work, parent+".wrote")
		cmds := [][]string{{"/bin/sh", "-c", winner(flag, n-1)}}
		for k := 1; k < n; k++ {
			cmds = append(cmds, []string{"/bin/sh", "-c", loser(port, flag, stubborn)})
		}
		recs, err := runner.Race(ctx, o, runner.RaceSpec{Parent: parent, Cmds: cmds})
		if err != nil {
			return err
		}
		if recs[0].State != branches.StateCommitted {
			return fmt.Errorf("race %d: the winner did not commit: %+v", i, recs[0])
		}
		mu.Lock()
		var last time.Time
		for _, r := range recs[1:] {
			if t := ended[r.Branch]; t.After(last) {
				last = t
			}
			if r.KilledBy != runner.KilledBySibling {
				mu.Unlock()
				return fmt.Errorf("race %d: loser %s: %+v", i, r.Branch, r)
			}
		}
		lat = append(lat, last.Sub(committed))
		tc := committed
		mu.Unlock()
		for _, r := range recs[1:] {
			ok, refused, before, err := countWrites(filepath.Join(work, r.Branch, "log"), tc)
			if err != nil {
				return err
			}
			landedAfter += ok
			refusedAfter += refused
			writesBefore += before
		}
		if _, err := mgr.Abort(ctx, parent); err != nil {
			return err
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	kind := "both obey SIGTERM"
	if stubborn {
		kind = "the setsid one ignores SIGTERM"
	}
	fmt.Printf("races: %d of N=%d (1 winner, %d losers each; every loser forks 2 writing grandchildren, one of them setsid; %s), grace %v\n", races, n, n-1, kind, grace)
	fmt.Printf("winner's commit -> every loser process gone: p50 %v, p99 %v, max %v\n",
		q(0.50).Round(100*time.Microsecond), q(0.99).Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
	fmt.Printf("loser writes landed before the commit: %d; started after it: %d refused (ESTALE or mount refused), %d landed\n",
		writesBefore, refusedAfter, landedAfter)
	if landedAfter != 0 {
		return fmt.Errorf("%d loser writes landed after the winner's commit", landedAfter)
	}
	return nil
}

// runStart measures, over races of n attempts, the time from runner.Race
// being called to the last attempt's command running (each command first
// records the time it runs), and the time of one fork for comparison.
func runStart(races, n int) error {
	tmp, err := os.MkdirTemp("", "racebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	mgr, closeStore, err := openStore(ctx, tmp, quiet)
	if err != nil {
		return err
	}
	defer closeStore()
	work := filepath.Join(tmp, "work")
	o := runner.Options{
		Backend: mgr, Store: tmp, Grace: 100 * time.Millisecond, Timeout: 2 * time.Minute, Logger: quiet,
		Workdir: func(b string) (string, error) {
			d := filepath.Join(work, b)
			return d, os.MkdirAll(d, 0o755)
		},
		Flush: func(string) error { return nil },
	}
	var all, forks []time.Duration
	for i := 0; i < races; i++ {
		parent := fmt.Sprintf("p%d", i)
		t := time.Now()
		if _, err := mgr.Fork(ctx, branches.MainBranch, parent); err != nil {
			return err
		}
		forks = append(forks, time.Since(t))
		stamps := filepath.Join(work, parent+".started")
		if err := os.MkdirAll(stamps, 0o755); err != nil {
			return err
		}
		// Each command records when it runs; attempt 0 wins once all run.
		rec := `date +%s%N > ` + stamps + `/$BRANCHNFS_BRANCH.tmp && mv ` + stamps + `/$BRANCHNFS_BRANCH.tmp ` + stamps + `/$BRANCHNFS_BRANCH; `
		cmds := [][]string{{"/bin/sh", "-c", rec + fmt.Sprintf(`while [ "$(ls %s | grep -cv '[.]tmp$')" -lt %d ]; do sleep 0.01; done`, stamps, n)}}
		for k := 1; k < n; k++ {
			cmds = append(cmds, []string{"/bin/sh", "-c", rec + "exec sleep 1000"})
		}
		t0 := time.Now()
		recs, err := runner.Race(ctx, o, runner.RaceSpec{Parent: parent, Cmds: cmds})
		if err != nil {
			return err
		}
		if recs[0].State != branches.StateCommitted {
			return fmt.Errorf("race %d: the winner did not commit: %+v", i, recs[0])
		}
		var last time.Time
		for _, r := range recs {
			b, err := os.ReadFile(filepath.Join(stamps, r.Branch))
			if err != nil {
				return fmt.Errorf("race %d: %s never ran: %v", i, r.Branch, err)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return err
			}
			if ts := time.Unix(0, ns); ts.After(last) {
				last = ts
			}
		}
		all = append(all, last.Sub(t0))
		if _, err := mgr.Abort(ctx, parent); err != nil {
			return err
		}
	}
	q := func(d []time.Duration, p float64) time.Duration {
		d = append([]time.Duration{}, d...)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[min(len(d)-1, int(p*float64(len(d))))].Round(100 * time.Microsecond)
	}
	fmt.Printf("races: %d of N=%d\n", races, n)
	fmt.Printf("race start -> all %d commands running: p50 %v, p99 %v\n", n, q(all, 0.5), q(all, 0.99))
	fmt.Printf("one fork (for the bound 200ms + N forks): p50 %v, p99 %v\n", q(forks, 0.5), q(forks, 0.99))
	return nil
}

// winner exits 0 once losers loser logs show a landed write each.
func winner(flag string, losers int) string {
	return fmt.Sprintf(`while [ "$(cat %s.* 2>/dev/null | wc -l)" -lt %d ]; do sleep 0.01; done; exit 0`, flag, losers)
}

// loser forks two grandchildren that write into the branch through NFS in
// a loop, logging "ok|fail START_NS" per write; the first landed write of
// each loser touches flag.BRANCH.
func loser(port int, flag string, stubborn bool) string {
	url := fmt.Sprintf(`nfs://127.0.0.1/$BRANCHNFS_BRANCH/w$$.$i?nfsport=%d&mountport=%d&version=3&auto-traverse-mounts=0&autoreconnect=0`, port, port)
	loop := `i=0; echo x > .src.$$; while :; do i=$((i+1)); t=$(date +%s%N); if nfs-cp .src.$$ "` + url + `" >/dev/null 2>&1; then echo "ok $t" >> log; [ -e ` + flag + `.$BRANCHNFS_BRANCH ] || echo 1 > ` + flag + `.$BRANCHNFS_BRANCH; else echo "fail $t" >> log; fi; done`
	trap := ""
	if stubborn {
		trap = `trap "" TERM; `
	}
	return `( setsid sh -c '` + trap + loop + `' & ) ; ( sh -c '` + loop + `' & ) ; sleep 1000`
}

// countWrites reads a loser's log: writes that succeeded after tc, writes
// refused after tc, writes that landed before tc.
func countWrites(path string, tc time.Time) (okAfter, refusedAfter, before int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue // a line cut by SIGKILL
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		after := time.Unix(0, ns).After(tc)
		switch {
		case f[0] == "ok" && after:
			okAfter++
		case f[0] == "ok":
			before++
		case after:
			refusedAfter++
		}
	}
	return okAfter, refusedAfter, before, nil
}

// openStore opens a fresh store in dir and its branches; closeStore closes
// both.
func openStore(ctx context.Context, dir string, logger *slog.Logger) (mgr *branches.Manager, closeStore func(), err error) {
	st, err := kv.OpenBadger(filepath.Join(dir, "db"), kv.BadgerOptions{Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	mgr, err = branches.Open(ctx, branches.Options{Store: st, Logger: logger, RootUID: uint32(os.Geteuid()), RootGID: uint32(os.Getegid())})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return mgr, func() { mgr.Close(); st.Close() }, nil
}

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
)

// Attempts run in plain directories here (--workdir-root: no kernel NFS
// client on the host) but write into their branches through NFS with
// nfs-cp, so the server's fencing is real. The kernel-client suite runs
// them in a real mount.

// putScript writes a file into the attempt's own branch through NFS.
func putScript(port int, name string) string {
	return fmt.Sprintf(`echo "$BRANCHNFS_BRANCH" > .src && nfs-cp .src "%s"`, nfsURL(port, "/$BRANCHNFS_BRANCH/"+name))
}

// A loser that ignores SIGTERM and keeps writing after the winner commits
// is refused (ESTALE) from the commit on, and its tree is killed.
func TestRaceFencesLoserWrites(t *testing.T) {
	needLibnfs(t)
	store := newStore(t)
	srv := startServer(t, store, 0)
	owner := storeOwner(store)
	root := userDir(t, owner)
	loserLog := filepath.Join(root, "loser.log")
	pidFile := filepath.Join(root, "loser.pid")
	// The loser's grandchild leaves the session, ignores SIGTERM and
	// writes a new file into its branch in a loop, logging each outcome.
	loop := fmt.Sprintf(`trap "" TERM; echo $$ > %s; i=0; while :; do i=$((i+1)); echo $i > .src; if nfs-cp .src "%s" 2>.err; then echo "ok $i" >> %s; else echo "fail $i $(tr '\n' ' ' < .err)" >> %s; fi; done`,
		pidFile, nfsURL(srv.port, "/$BRANCHNFS_BRANCH/w$i"), loserLog, loserLog)
	loser := fmt.Sprintf(`( setsid sh -c '%s' & ) ; sleep 1000`, strings.ReplaceAll(loop, `'`, `'\''`))
	// The winner commits once the loser has landed a few writes.
	winner := fmt.Sprintf(`while [ "$(cat %s 2>/dev/null | grep -c ^ok)" -lt 3 ]; do sleep 0.05; done; %s`, loserLog, putScript(srv.port, "winner.txt"))
	code, stdout, _ := cli(t, store, "race", "main", "--json", "--grace", "1s", "--timeout", "2m", "--workdir-root", root, "-c", loser, "-c", winner)
	if code != 0 {
		t.Fatalf("race: exit %d", code)
	}
	var recs []runner.Record
	if err := json.Unmarshal([]byte(stdout), &recs); err != nil {
		t.Fatal(err)
	}
	if recs[1].State != branches.StateCommitted || recs[0].KilledBy != runner.KilledBySibling || recs[0].State != branches.StateAborted {
		t.Fatalf("records %+v: want attempt 1 committed, attempt 0 killed by its sibling and aborted", recs)
	}
	if got := mustLibnfs(t, "nfs-cat", nfsURL(srv.port, "/main/winner.txt")); strings.TrimSpace(got) != recs[1].Branch {
		t.Fatalf("main/winner.txt = %q, want %q", got, recs[1].Branch)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("loser's grandchild %d alive after the race", pid)
	}
	// Once a write was refused, none succeeded: the fence came before the
	// kill, and held.
	lines := strings.Split(strings.TrimSpace(readLocal(t, loserLog)), "\n")
	failed := false
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "fail"):
			failed = true
		case failed:
			t.Fatalf("loser write succeeded after a refused one: %q\n%s", l, strings.Join(lines, "\n"))
		}
	}
	if !failed {
		t.Fatalf("no loser write was refused during the 1s grace (it ignores SIGTERM):\n%s", strings.Join(lines, "\n"))
	}
	t.Logf("loser log: %d lines, last %q", len(lines), lines[len(lines)-1])
}

func readLocal(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exec as a regular user: the command's writes through NFS are in the
// parent after --on-exit commit; the exit status is the command's.
func TestExecCommitAsUser(t *testing.T) {
	needLibnfs(t)
	store := newStore(t)
	srv := startServer(t, store, 0)
	root := userDir(t, storeOwner(store))
	mustCLI(t, store, "fork", "main", "b")
	// cli appends --store after the command too, where sh -c takes it as
	// $0 and $1.
	code, stdout, _ := cli(t, store, "exec", "b", "--on-exit", "commit", "--json", "--workdir-root", root, "--store", store,
		"--", "/bin/sh", "-c", putScript(srv.port, "from-exec.txt"))
	if code != 0 {
		t.Fatalf("exec: exit %d", code)
	}
	var rec runner.Record
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != branches.StateCommitted || rec.Diff == nil || rec.Diff.Added != 1 {
		t.Fatalf("record %+v: want committed with one added file", rec)
	}
	if os.Geteuid() == 0 && rec.Supervision.Isolation == "cgroup" {
		// The regular user has no delegated cgroup here: the fallback
		// must be said.
		t.Fatalf("supervision %+v: a cgroup for uid %d?", rec.Supervision, storeOwner(store).uid)
	}
	if rec.Supervision.Isolation != "cgroup" && rec.Supervision.Fallback == "" {
		t.Fatalf("supervision %+v: no cgroup and no reason", rec.Supervision)
	}
	if got := mustLibnfs(t, "nfs-cat", nfsURL(srv.port, "/main/from-exec.txt")); strings.TrimSpace(got) != "b" {
		t.Fatalf("main/from-exec.txt = %q", got)
	}
	mustCLI(t, store, "fork", "main", "c")
	if code, _, _ := cli(t, store, "exec", "c", "--workdir-root", root, "--store", store, "--", "/bin/sh", "-c", "exit 42"); code != 42 {
		t.Fatalf("exec exit 42: got %d", code)
	}
}

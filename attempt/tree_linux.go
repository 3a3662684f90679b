package attempt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tree is the helper's view of the attempt's processes on Linux: the
// helper is a child subreaper, so every process of the tree is one of its
// descendants until it is reaped; a cgroup v2 subtree, where one is
// delegated, holds them as well.
type tree struct {
	self      int         // read only: the helper's pid
	pgid      int         // the leader's process group
	groupGone atomic.Bool // the group was found empty: never signal it again
	cg        string      // the attempt's cgroup directory, "" for none
	fallback  string      // why there is no cgroup
	isolation string
}

func newTree(noCgroup bool) (*tree, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): %w", err)
	}
	t := &tree{self: os.Getpid()}
	if noCgroup {
		t.fallback = "cgroup disabled by the caller"
	} else {
		t.cg, t.fallback = makeCgroup(t.self)
	}
	return t, nil
}

// makeCgroup creates a cgroup for the attempt under the helper's own
// cgroup, if the helper may write there (a delegated subtree). It returns
// the directory, or why there is none and how to get one.
func makeCgroup(self int) (dir, fallback string) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Sprintf("cannot read /proc/self/cgroup: %v", err)
	}
	rel, ok := "", false
	for _, line := range strings.Split(string(b), "\n") {
		if r, found := strings.CutPrefix(line, "0::"); found {
			rel, ok = r, true
		}
	}
	if !ok {
		return "", "no cgroup v2 hierarchy (this system uses cgroup v1 only): the tree is held by the subreaper and the process group"
	}
	mnt := cgroup2Mount()
	if mnt == "" {
		return "", "cgroup v2 is not mounted in this mount namespace: the tree is held by the subreaper and the process group"
	}
	own := filepath.Join(mnt, rel)
	if unix.Access(own, unix.W_OK) != nil || unix.Access(filepath.Join(own, "cgroup.procs"), unix.W_OK) != nil {
		return "", fmt.Sprintf("cgroup %s is not delegated to uid %d (not writable): the tree is held by the subreaper and the process group; to get a cgroup, run under a delegated one, e.g. systemd-run --user --scope -p Delegate=yes branchnfs ...", own, os.Geteuid())
	}
	dir = filepath.Join(own, "branchnfs-attempt-"+strconv.Itoa(self))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Sprintf("cannot create cgroup %s: %v: the tree is held by the subreaper and the process group", dir, err)
	}
	return dir, ""
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts... - fstype source superopts
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) >= 5 && len(qf) >= 1 && qf[0] == "cgroup2" && pf[3] == "/" {
			return pf[4]
		}
	}
	return ""
}

// start starts cmd in the attempt's cgroup (CLONE_INTO_CGROUP, so that not
// even a first fork escapes it), falling back to no cgroup if the kernel
// refuses.
func (t *tree) start(cmd *exec.Cmd) error {
	if t.cg == "" {
		t.isolation = "subreaper"
		if err := cmd.Start(); err != nil {
			return err
		}
		t.pgid = cmd.Process.Pid
		return nil
	}
	fd, err := unix.Open(t.cg, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
		err = cmd.Start()
		unix.Close(fd)
		if err == nil {
			t.isolation = "cgroup"
			t.pgid = cmd.Process.Pid
			return nil
		}
		var ee *exec.Error
		if errors.As(err, &ee) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return err
		}
		cmd.SysProcAttr.UseCgroupFD = false
		cmd.SysProcAttr.CgroupFD = 0
		cmd.Process = nil
	}
	t.fallback = fmt.Sprintf("cannot start the command in cgroup %s (%v): the tree is held by the subreaper and the process group", t.cg, err)
	os.Remove(t.cg)
	t.cg = ""
	return t.start(cmd)
}

func (t *tree) info(leader int) Info {
	return Info{PID: leader, PGID: t.pgid, Isolation: t.isolation, Cgroup: t.cg, Fallback: t.fallback}
}

// signal sends sig to every process of the tree: the process group, the
// cgroup's processes and every descendant of the helper.
func (t *tree) signal(sig syscall.Signal) {
	t.signalGroup(sig)
	if t.cg != "" {
		if b, err := os.ReadFile(filepath.Join(t.cg, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					unix.Kill(pid, sig)
				}
			}
		}
	}
	for _, pid := range descendants(t.self) {
		unix.Kill(pid, sig)
	}
}

// kill sends SIGKILL to the whole tree (cgroup.kill first where there is
// a cgroup).
func (t *tree) kill() {
	if t.cg != "" {
		os.WriteFile(filepath.Join(t.cg, "cgroup.kill"), []byte("1"), 0) // kernel < 5.14: the loop below
	}
	t.signal(syscall.SIGKILL)
}

// reap reaps children of the helper (orphans of the tree re-parented to
// it, and the leader) until it reaps the leader, and returns its status.
func (t *tree) reap(leader int) (st Status, ok bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // ECHILD: no child left
			return st, ok
		}
		if pid == leader {
			st, ok = statusOf(ws), true
			return st, ok
		}
	}
}

// waitGone waits until the helper has no child left (it is the subreaper
// of the tree) and, with a cgroup, until the cgroup is empty.
func (t *tree) waitGone() {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR || err == nil {
			continue
		}
		break
	}
	if t.cg == "" {
		return
	}
	ev := filepath.Join(t.cg, "cgroup.events")
	for {
		b, err := os.ReadFile(ev)
		if err != nil || bytes.Contains(b, []byte("populated 0")) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cleanup removes the attempt's cgroup.
func (t *tree) cleanup() {
	if t.cg == "" {
		return
	}
	for i := 0; i < 100; i++ {
		if err := os.Remove(t.cg); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proc is one process as /proc shows it.
type proc struct {
	ppid, sid int
}

// procs reads every process's parent and session from /proc.
func procs() map[int]proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]proc, len(ents))
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...; comm may hold spaces and
		// parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 4 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		sid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		out[p] = proc{ppid: ppid, sid: sid}
	}
	return out
}

// below lists the processes below the roots in ps (not the roots).
func below(ps map[int]proc, roots ...int) []int {
	kids := map[int][]int{}
	for p, in := range ps {
		kids[in.ppid] = append(kids[in.ppid], p)
	}
	var out []int
	queue := append([]int{}, roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int { return below(procs(), pid) }

// The supervisor is a child subreaper too (holdOrphans), so that what a
// dead helper leaves is re-parented to the supervisor, not to init, and
// stays within reach: a process of the tree can kill its helper (same
// uid), and one that left the process group (setsid) would then be found
// by nothing else.
var (
	subreaperOnce sync.Once
	subreaperErr  error // read only after subreaperOnce
)

// holdOrphans makes this process (the supervisor) a child subreaper, once.
func holdOrphans() error {
	subreaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			subreaperErr = fmt.Errorf("the supervisor cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER: %w): processes of an attempt that kills its helper and leaves its process group cannot be found", err)
		}
	})
	return subreaperErr
}

// orphanDeadline bounds how long killOrphans goes on killing and reaping.
const orphanDeadline = 10 * time.Second

// killOrphans ends what a dead helper left of its tree, from the
// supervisor: cgroup.kill and every process of the cgroup, the process
// group, and every process re-parented to the supervisor (a child
// subreaper) from another session (the tree runs in sessions of its own;
// the supervisor's own children stay in its session), with all their
// descendants, until none is left; it reaps them, and removes the cgroup
// once it is empty. It returns how many processes it found outside the
// cgroup and the process group, and an error if some could not be ended
// (within orphanDeadline) or could not be looked for.
func killOrphans(in Info) (int, error) {
	if in.Cgroup != "" {
		os.WriteFile(filepath.Join(in.Cgroup, "cgroup.kill"), []byte("1"), 0)
		if b, err := os.ReadFile(filepath.Join(in.Cgroup, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					unix.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
	if in.PGID > 0 {
		unix.Kill(-in.PGID, syscall.SIGKILL)
	}
	n, err := killAdopted()
	if in.Cgroup != "" {
		for i := 0; i < 500; i++ {
			if err := os.Remove(in.Cgroup); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return n, err
}

// killAdopted kills and reaps the processes re-parented to this process
// from other sessions, and all below them, until there is none left.
func killAdopted() (int, error) {
	if err := holdOrphans(); err != nil {
		return 0, err
	}
	self := os.Getpid()
	sid, err := unix.Getsid(0)
	if err != nil {
		return 0, fmt.Errorf("getsid: %w", err)
	}
	seen := map[int]bool{}
	deadline := time.Now().Add(orphanDeadline)
	for {
		ps := procs()
		var adopted []int
		for p, in := range ps {
			if in.ppid == self && in.sid != sid {
				adopted = append(adopted, p)
			}
		}
		if len(adopted) == 0 {
			return len(seen), nil
		}
		for _, p := range append(below(ps, adopted...), adopted...) {
			seen[p] = true
			unix.Kill(p, syscall.SIGKILL)
		}
		for _, p := range adopted {
			var ws unix.WaitStatus
			unix.Wait4(p, &ws, unix.WNOHANG, nil) // our child, never one os/exec waits for
		}
		if time.Now().After(deadline) {
			return len(seen), fmt.Errorf("%d processes left by the dead helper still run after %v of SIGKILL: %v", len(adopted), orphanDeadline, adopted)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

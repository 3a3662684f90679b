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

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		kids[ppid] = append(kids[ppid], p)
	}
	var out []int
	queue := []int{pid}
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

// killOrphans ends what a dead helper left of its tree, from the
// supervisor: cgroup.kill and every process of the cgroup, then the process
// group, and removes the cgroup once it is empty (waiting at most 5 s).
// Processes that left both (only possible without a cgroup) are out of
// reach once the subreaper is gone.
func killOrphans(in Info) {
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
	if in.Cgroup != "" {
		for i := 0; i < 500; i++ {
			if err := os.Remove(in.Cgroup); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/bench/nfsclient"
)

// server is one NFS server process started by the suite.
type server struct {
	kind      string // "branchnfs", "ganesha", "osnfs"
	cmd       *exec.Cmd
	nfsPort   int
	mountPort int
	root      string // ganesha: the exported directory; osnfs: the served directory
	store     string // branchnfs: the store directory
	logPath   string
	done      chan struct{} // closed when the process has exited
	waitErr   error         // the exit status, once done is closed
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitPort(s *server, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("%s exited during startup (%v); log %s:\n%s", s.kind, s.waitErr, s.logPath, tail(s.logPath, 20))
		default:
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not listen on port %d within %v; log %s:\n%s", s.kind, port, timeout, s.logPath, tail(s.logPath, 20))
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (s *server) start(name string, args ...string) error {
	logf, err := os.Create(s.logPath)
	if err != nil {
		return err
	}
	s.cmd = exec.Command(name, args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.done = make(chan struct{})
	go func() { s.waitErr = s.cmd.Wait(); logf.Close(); close(s.done) }()
	return nil
}

// stop sends SIGTERM, waits up to 10 s, then SIGKILLs.
func (s *server) stop() error {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("%s did not stop on SIGTERM within 10 s; killed", s.kind)
	}
}

// target returns the address of an export: for branchnfs the branch name,
// otherwise ignored.
func (s *server) target(branch string) nfsclient.Target {
	t := nfsclient.Target{Host: "127.0.0.1", NFSPort: s.nfsPort, MountPort: s.mountPort}
	switch s.kind {
	case "branchnfs":
		t.Export = "/" + branch
	case "ganesha":
		t.Export = s.root
	case "osnfs":
		// osnfs serves its directory for any MOUNT path; libnfs cannot
		// mount "/" on go-nfs v0.0.4 (GARBAGE_ARGS), so use a name.
		t.Export = "/x"
	}
	return t
}

// url returns a libnfs URL for file in the export's root.
func (s *server) url(t nfsclient.Target, file string) string {
	return fmt.Sprintf("nfs://127.0.0.1%s/%s?nfsport=%d&mountport=%d&version=3&auto-traverse-mounts=0&autoreconnect=0",
		strings.TrimSuffix(t.Export, "/"), file, t.NFSPort, t.MountPort)
}

// memory returns VmHWM, VmRSS, RssAnon and RssFile of the server process
// in bytes. RssFile counts pages of mmapped files (Badger's value log and
// tables), RssAnon the Go heap and other private memory.
func (s *server) memory() (hwm, rss, anon, file int64) {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return 0, 0, 0, 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0, 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 {
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			switch fields[0] {
			case "VmHWM:":
				hwm = v << 10
			case "VmRSS:":
				rss = v << 10
			case "RssAnon:":
				anon = v << 10
			case "RssFile:":
				file = v << 10
			}
		}
	}
	return hwm, rss, anon, file
}

// cpuSeconds returns the CPU time (user + system, all threads) the server
// process has used so far, 0 when it cannot be read.
func (s *server) cpuSeconds() float64 {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	return statCPU(b)
}

// selfCPUSeconds returns this process's CPU time (user + system, all
// threads) in seconds, 0 if the system cannot say.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// statCPU returns utime + stime, in seconds, of a /proc/PID/stat line, 0
// when it does not parse. The fields after the command name (which may
// hold spaces and parentheses) start with the state; utime and stime are
// the 14th and 15th fields, in clock ticks (100 Hz on Linux).
func statCPU(b []byte) float64 {
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	k, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return (u + k) / 100
}

// resetPeak resets the process's VmHWM to its current RSS (Linux
// clear_refs "5"), so the next memory() reports the peak since now.
func (s *server) resetPeak() {
	if s != nil && s.cmd != nil && s.cmd.Process != nil {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.cmd.Process.Pid), []byte("5"), 0)
	}
}

func startGanesha(tmp string) (*server, error) {
	dir := filepath.Join(tmp, "ganesha")
	s := &server{kind: "ganesha", root: filepath.Join(dir, "export"), logPath: filepath.Join(dir, "ganesha.log")}
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		return nil, err
	}
	var err error
	if s.nfsPort, err = freePort(); err != nil {
		return nil, err
	}
	if s.mountPort, err = freePort(); err != nil {
		return nil, err
	}
	nlm, _ := freePort()
	rq, _ := freePort()
	conf := fmt.Sprintf(`NFS_CORE_PARAM {
    NFS_Port = %d;
    MNT_Port = %d;
    NLM_Port = %d;
    Rquota_Port = %d;
    Bind_addr = 127.0.0.1;
    Protocols = 3;
    Enable_NLM = false;
    Enable_RQUOTA = false;
}
NFSV4 { Graceless = true; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 77;
    Path = %s;
    Pseudo = %s;
    Protocols = 3;
    Transports = TCP;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
`, s.nfsPort, s.mountPort, nlm, rq, s.root, s.root)
	confPath := filepath.Join(dir, "ganesha.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := s.start("ganesha.nfsd", "-F", "-f", confPath, "-L", s.logPath, "-p", filepath.Join(dir, "ganesha.pid"), "-N", "NIV_EVENT"); err != nil {
		return nil, fmt.Errorf("start ganesha.nfsd: %w", err)
	}
	if err := waitPort(s, s.nfsPort, 20*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	if err := waitPort(s, s.mountPort, 10*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, waitMount(s, s.target(""))
}

// waitMount retries MOUNT until the server answers (ganesha listens before
// its exports are ready).
func waitMount(s *server, t nfsclient.Target) error {
	var err error
	for i := 0; i < 100; i++ {
		var c *nfsclient.Conn
		if c, err = nfsclient.Dial(t); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.stop()
	return fmt.Errorf("%s: MOUNT %s keeps failing: %w; log %s:\n%s", s.kind, t.Export, err, s.logPath, tail(s.logPath, 20))
}

func startOsnfs(tmp, bin string) (*server, error) {
	dir := filepath.Join(tmp, "osnfs")
	s := &server{kind: "osnfs", root: filepath.Join(dir, "root"), logPath: filepath.Join(dir, "osnfs.log")}
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		return nil, err
	}
	var err error
	if s.nfsPort, err = freePort(); err != nil {
		return nil, err
	}
	s.mountPort = s.nfsPort
	if err := s.start(bin, s.root, strconv.Itoa(s.nfsPort)); err != nil {
		return nil, fmt.Errorf("start osnfs: %w", err)
	}
	if err := waitPort(s, s.nfsPort, 10*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, waitMount(s, s.target(""))
}

// branchnfsCLI runs one branchnfs command and returns its combined output.
func branchnfsCLI(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("branchnfs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// startBranchnfs serves an existing store.
func startBranchnfs(bin, store, logPath string) (*server, error) {
	s := &server{kind: "branchnfs", store: store, logPath: logPath}
	var err error
	if s.nfsPort, err = freePort(); err != nil {
		return nil, err
	}
	s.mountPort = s.nfsPort
	if err := s.start(bin, "serve", "--store", store, "--listen", fmt.Sprintf("127.0.0.1:%d", s.nfsPort)); err != nil {
		return nil, fmt.Errorf("start branchnfs: %w", err)
	}
	if err := waitPort(s, s.nfsPort, 60*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, waitMount(s, s.target("main"))
}

var errSkipped = errors.New("skipped")

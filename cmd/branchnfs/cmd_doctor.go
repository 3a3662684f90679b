package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"golang.org/x/sys/unix"
)

// Check results. The names and statuses are part of the stable output of
// doctor (README.md).
const (
	checkOK   = "ok"
	checkWarn = "warn" // works, but something will bite
	checkFail = "fail" // broken: Fix says what to do
	checkSkip = "skip" // could not be checked here: Detail says why
)

// doctorCheck is one result of doctor.
type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// doctorReport is the --json output of doctor.
type doctorReport struct {
	Version buildVersion  `json:"version"`
	Store   string        `json:"store"`
	Checks  []doctorCheck `json:"checks"`
	// OK: no check failed.
	OK bool `json:"ok"`
}

type doctorOptions struct {
	*globalOptions
	JSON     bool
	Reserve  string
	MountDir string
	// NoMount: check the filesystem through the userspace client even
	// where the OS's client could mount.
	NoMount bool
	// Mounted: a directory where the export / is already mounted; the
	// filesystem checks run in its scratch branch's directory.
	Mounted string

	// What the checks read, replaced by tests.
	goos      string
	home      string
	mountinfo func() (string, error)              // the OS's mount table (mountinfo on Linux)
	diskFree  func(dir string) (uint64, error)    // free bytes for an unprivileged user
	cc        func() (string, error)              // TCP congestion control
	fsOnMount func(ctx context.Context) bool      // nil: canMount
	dial      func(addr string) (net.Conn, error) // nil: net.DialTimeout
	// mountedWait: how long --mounted waits for the scratch branch to
	// show in the mount (default 10s).
	mountedWait time.Duration
}

func newDoctorCommand(g *globalOptions) *cobra.Command {
	opts := &doctorOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the server, the store, the disk, the mounts and the filesystem, and say how to fix what fails",
		Long: `Check what branchnfs needs, print each result with the fix, and exit 1 if
a check failed. Paste its output (or --json) into a bug report.

It finds the running server and its version; checks the store directory's
permissions, the free disk against --reserve, NFS mounts left behind by a
stopped server, the mount point's location (macOS: outside the folders
privacy protection guards) and the host's TCP congestion control. With a
server, it forks a scratch branch and, through a mount by the OS's own
client where one can be made (macOS as you; Linux as root), else through
the built-in userspace NFS client, writes, reads, renames, fsyncs, locks
(flock and fcntl, mount only), chmods, round-trips an NFC/NFD name, writes
a large file and makes a symlink; then it removes the branch. With
--mounted DIR, where the export / is already mounted (e.g. by
branchnfs mount / DIR, or in a VM), it runs those checks in DIR/BRANCH
instead, through that mount's client, as any user.

It reaches the server as the other commands do: the store's socket, or
$BRANCHNFS_CONTROL (tcp://HOST:PORT, token in $BRANCHNFS_CONTROL_TOKEN).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDoctor(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the results as JSON")
	cmd.Flags().StringVar(&opts.Reserve, "reserve", "512MiB", "the free space serve keeps (serve --reserve)")
	cmd.Flags().StringVar(&opts.MountDir, "mount-dir", "", "the directory you mount branches under (default: the server's --mount, else the suggested one)")
	cmd.Flags().BoolVar(&opts.NoMount, "no-mount", false, "check the filesystem through the userspace client, without mounting")
	cmd.Flags().StringVar(&opts.Mounted, "mounted", "", "check the filesystem in DIR/BRANCH of your existing mount of the export / at DIR, instead of mounting")
	return cmd
}

// errDoctorFailed: a check failed (exit 1; the output says which).
var errDoctorFailed = errors.New("doctor: a check failed (marked [fail] above, with its fix)")

func (o *doctorOptions) ensureDefaults() {
	if o.goos == "" {
		o.goos = runtime.GOOS
	}
	if o.home == "" {
		o.home, _ = os.UserHomeDir()
	}
	if o.mountinfo == nil {
		o.mountinfo = readMountTable
	}
	if o.diskFree == nil {
		o.diskFree = diskFree
	}
	if o.cc == nil {
		o.cc = congestionControl
	}
	if o.mountedWait == 0 {
		o.mountedWait = 10 * time.Second
	}
	if o.dial == nil {
		o.dial = func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) }
	}
}

func runDoctor(ctx context.Context, o *doctorOptions) error {
	if o.Mounted != "" && o.NoMount {
		return usagef("--mounted and --no-mount: give one (--mounted checks through your mount, --no-mount through the userspace client)")
	}
	rep := doctor(ctx, o)
	if o.JSON {
		if err := writeJSON(o.stdout, rep); err != nil {
			return err
		}
	} else {
		printDoctor(o.stdout, rep)
	}
	if !rep.OK {
		return errDoctorFailed
	}
	return nil
}

// doctor runs every check, in a fixed order.
func doctor(ctx context.Context, o *doctorOptions) doctorReport {
	o.ensureDefaults()
	rep := doctorReport{Version: versionInfo()}
	add := func(c doctorCheck) { rep.Checks = append(rep.Checks, c) }
	add(doctorCheck{Name: "version", Status: checkOK, Detail: "branchnfs " + rep.Version.String() + ", " + rep.Version.Go + " " + rep.Version.OS + "/" + rep.Version.Arch})

	svc, svcArgs := o.checkService(ctx)
	add(svc)
	// Unchecked: the store-dir check below says what is unsafe about it.
	dir, err := o.storePath()
	if err != nil {
		add(doctorCheck{Name: "store", Status: checkFail, Detail: err.Error(), Fix: "give the store with --store DIR or $BRANCHNFS_STORE"})
		return finishDoctor(rep)
	}
	if s := flagValue(svcArgs, "--store"); s != "" && o.Store == "" && os.Getenv("BRANCHNFS_STORE") == "" {
		dir = s // the installed service's store
	}
	rep.Store = dir

	// The server.
	var client *control.Client
	var st control.Status
	addr, where := control.SocketPath(dir), control.SocketPath(dir)
	fix := "start it: branchnfs service install (keeps it running), or branchnfs serve"
	if a := os.Getenv("BRANCHNFS_CONTROL"); a != "" {
		// A forwarded API (tcp://HOST:PORT), as the other commands take
		// it (openBackend), e.g. from inside a VM.
		addr, where = a, "$BRANCHNFS_CONTROL="+a
		fix = "check $BRANCHNFS_CONTROL (tcp://HOST:PORT forwarding the server's control socket) and $BRANCHNFS_CONTROL_TOKEN, or unset them"
	}
	if c, s, err := control.Dial(ctx, addr, dialTimeout); err == nil {
		client, st = c, s
		defer c.Close()
		chk := doctorCheck{Name: "server", Status: checkOK,
			Detail: fmt.Sprintf("branchnfs %s, pid %d, NFS on %s, store %s", s.Version, s.PID, s.Listen, s.Store)}
		if s.Version != rep.Version.Version {
			chk.Status = checkWarn
			chk.Detail += fmt.Sprintf("; this branchnfs is %s", rep.Version.Version)
			chk.Fix = "restart the server with this binary (branchnfs service install, or stop serve and start it again)"
		}
		add(chk)
	} else {
		add(doctorCheck{Name: "server", Status: checkWarn, Detail: fmt.Sprintf("no server answers on %s (%v)", where, err), Fix: fix})
	}

	if where != addr {
		// The store is the server's, on the machine the API is
		// forwarded from: nothing of it to check here.
		why := "the server's store is where " + where + " forwards to, not on this machine"
		if client != nil {
			rep.Store = st.Store
		}
		add(doctorCheck{Name: "store-dir", Status: checkSkip, Detail: why})
		add(doctorCheck{Name: "disk-space", Status: checkSkip, Detail: why})
	} else {
		add(checkStoreDir(dir))
		add(o.checkDisk(dir))
	}
	add(o.checkStaleMounts(dir, client != nil, st.Port))
	add(o.checkMountPoint(st.Mount))
	add(o.checkCongestion())

	if client == nil {
		add(doctorCheck{Name: "filesystem", Status: checkSkip, Detail: "no server runs, so no branch could be checked", Fix: "start the server and run doctor again"})
		return finishDoctor(rep)
	}
	for _, c := range o.checkFilesystem(ctx, client, st) {
		add(c)
	}
	return finishDoctor(rep)
}

func finishDoctor(rep doctorReport) doctorReport {
	rep.OK = true
	for _, c := range rep.Checks {
		if c.Status == checkFail {
			rep.OK = false
		}
	}
	return rep
}

func printDoctor(w io.Writer, rep doctorReport) {
	fmt.Fprintf(w, "branchnfs doctor: %s\n", rep.Version.String())
	if rep.Store != "" {
		fmt.Fprintf(w, "store: %s\n", rep.Store)
	}
	n := map[string]int{}
	for _, c := range rep.Checks {
		n[c.Status]++
		fmt.Fprintf(w, "%-6s %-18s %s\n", "["+c.Status+"]", c.Name, c.Detail)
		if c.Fix != "" && c.Status != checkOK {
			fmt.Fprintf(w, "       %-18s fix: %s\n", "", c.Fix)
		}
	}
	fmt.Fprintf(w, "%d ok, %d warn, %d fail, %d skip\n", n[checkOK], n[checkWarn], n[checkFail], n[checkSkip])
}

// checkService reports the installed service, and returns the serve
// arguments it runs (nil when none is installed).
func (o *doctorOptions) checkService(ctx context.Context) (doctorCheck, []string) {
	c := doctorCheck{Name: "service"}
	path := serviceFilePath(o.home)
	data, err := os.ReadFile(path)
	if err != nil {
		c.Status, c.Detail = checkOK, "not installed (branchnfs service install keeps the server running)"
		return c, nil
	}
	args, err := serviceArgsOf(data)
	if err != nil {
		c.Status, c.Detail, c.Fix = checkFail, path+": "+err.Error(), "branchnfs service install (rewrites it)"
		return c, nil
	}
	ms := queryService(ctx)
	c.Detail = fmt.Sprintf("%s: %s", path, ms.State)
	if ms.PID != 0 {
		c.Detail += fmt.Sprintf(", pid %d", ms.PID)
	}
	if ms.Running {
		c.Status = checkOK
	} else {
		c.Status = checkWarn
		c.Fix = serviceStartHint + "; see why it stopped: branchnfs service logs"
	}
	return c, args
}

// checkStoreDir: the store directory, and every one above it, must be
// such that no other user can change them (checkStorePath, which every
// command applies): anyone who can rename entries in it can replace the
// database, the control socket or the control token.
func checkStoreDir(dir string) doctorCheck {
	c := doctorCheck{Name: "store-dir"}
	if err := checkStorePath(dir); err != nil {
		c.Status, c.Detail, c.Fix = checkFail, err.Error(), "make "+dir+" readable by you"
		if u, ok := errors.AsType[*unsafeStoreError](err); ok {
			c.Detail, c.Fix = u.Problem, u.Fix
		}
		return c
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		c.Status, c.Detail = checkWarn, dir+" does not exist yet"
		c.Fix = "branchnfs serve (or branchnfs init) creates it"
		return c
	}
	if err != nil {
		c.Status, c.Detail, c.Fix = checkFail, err.Error(), "make "+dir+" readable by you"
		return c
	}
	c.Status, c.Detail = checkOK, fmt.Sprintf("%s, mode %04o, no other user can change it", dir, fi.Mode().Perm())
	return c
}

func (o *doctorOptions) checkDisk(dir string) doctorCheck {
	c := doctorCheck{Name: "disk-space"}
	reserve, err := parseSize(o.Reserve)
	if err != nil {
		c.Status, c.Detail, c.Fix = checkFail, "--reserve: "+err.Error(), "give --reserve as serve takes it, e.g. 512MiB"
		return c
	}
	// The store's disk: the nearest existing directory.
	d := dir
	for {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		d = filepath.Dir(d)
	}
	free, err := o.diskFree(d)
	if err != nil {
		c.Status, c.Detail = checkSkip, "statfs "+d+": "+err.Error()
		return c
	}
	c.Detail = fmt.Sprintf("%s free on the store's disk; serve keeps %s (--reserve)", kv.FormatBytes(free), kv.FormatBytes(uint64(reserve)))
	switch {
	case reserve > 0 && free < uint64(reserve)/2:
		c.Status = checkFail
		c.Detail += ": the server starts read-only"
		c.Fix = "free space on that disk (abort branches you no longer need, then branchnfs gc), or lower serve --reserve"
	case reserve > 0 && free < uint64(reserve):
		c.Status = checkFail
		c.Detail += ": writes fail with no space"
		c.Fix = "free space on that disk (abort branches you no longer need, then branchnfs gc), or lower serve --reserve"
	case reserve > 0 && free < 2*uint64(reserve):
		c.Status = checkWarn
		c.Detail += ": little room before writes fail"
		c.Fix = "free space on that disk"
	default:
		c.Status = checkOK
	}
	return c
}

// checkStaleMounts looks for loopback NFS mounts whose server does not
// answer: programs that touch them hang or fail.
func (o *doctorOptions) checkStaleMounts(dir string, serverRuns bool, port int) doctorCheck {
	c := doctorCheck{Name: "stale-mounts"}
	text, err := o.mountinfo()
	if err != nil {
		c.Status, c.Detail = checkSkip, "cannot read the mount table: "+err.Error()
		return c
	}
	var stale, live []string
	for _, m := range loopbackNFSMounts(o.goos, text) {
		answers := false
		if m.Port != 0 {
			if conn, err := o.dial(net.JoinHostPort(m.Host, strconv.Itoa(m.Port))); err == nil {
				conn.Close()
				answers = true
			}
		} else {
			// macOS's mount output has no port: the mount is ours to
			// judge only by whether our server runs.
			answers = serverRuns
		}
		if answers {
			live = append(live, m.Dir)
		} else {
			stale = append(stale, m.Dir)
		}
	}
	if len(stale) > 0 {
		c.Status = checkFail
		c.Detail = "NFS mounts of a server that does not answer: " + strings.Join(stale, ", ")
		c.Fix = "start the server again (the mounts reconnect: handles survive restarts), or unmount each: " + staleUnmountHint
		return c
	}
	c.Status = checkOK
	c.Detail = fmt.Sprintf("%d loopback NFS mount(s), all answering", len(live))
	return c
}

// nfsMount is a loopback NFS mount in the OS's mount table.
type nfsMount struct {
	Source string // host:/export
	Dir    string
	Host   string
	Port   int // 0: not shown (macOS)
}

// loopbackNFSMounts parses the mount table: /proc/self/mountinfo on
// Linux, the output of mount on macOS.
func loopbackNFSMounts(goos, text string) []nfsMount {
	var out []nfsMount
	for _, line := range strings.Split(text, "\n") {
		var m nfsMount
		var opts string
		if goos == "darwin" {
			// 127.0.0.1:/main on /Users/me/mnt (nfs, nodev, nosuid, mounted by me)
			src, rest, ok := strings.Cut(line, " on ")
			if !ok {
				continue
			}
			i := strings.LastIndex(rest, " (")
			if i < 0 || !strings.HasPrefix(rest[i+2:], "nfs") {
				continue
			}
			m.Source, m.Dir = src, rest[:i]
		} else {
			// 36 25 0:32 / /mnt/x rw,relatime shared:1 - nfs 127.0.0.1:/ rw,vers=3,port=12049,...
			pre, post, ok := strings.Cut(line, " - ")
			if !ok {
				continue
			}
			pf, qf := strings.Fields(pre), strings.Fields(post)
			if len(pf) < 5 || len(qf) < 3 || (qf[0] != "nfs" && qf[0] != "nfs4") {
				continue
			}
			m.Source, m.Dir, opts = qf[1], unescapeMountDir(pf[4]), qf[2]
		}
		host, _, ok := strings.Cut(m.Source, ":/")
		if !ok {
			continue
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			continue
		}
		m.Host = host
		for _, o := range strings.Split(opts, ",") {
			if v, ok := strings.CutPrefix(o, "port="); ok {
				m.Port, _ = strconv.Atoi(v)
			}
		}
		out = append(out, m)
	}
	return out
}

// tccFolders are the folders macOS's privacy protection (TCC) guards: a
// mount point inside one makes every process ask for access, and launchd
// agents are refused.
var tccFolders = []string{"Desktop", "Documents", "Downloads", "Library/Mobile Documents", "Pictures", "Movies", "Music"}

func (o *doctorOptions) checkMountPoint(serverMount string) doctorCheck {
	c := doctorCheck{Name: "mount-point"}
	dir := o.MountDir
	if dir == "" {
		dir = serverMount
	}
	if dir == "" {
		dir = mountPointHint(o.goos, "all")
		if strings.HasPrefix(dir, "~/") {
			dir = filepath.Join(o.home, dir[2:])
		}
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		dir = abs
	}
	if o.goos == "darwin" && o.home != "" {
		for _, f := range tccFolders {
			p := filepath.Join(o.home, f)
			if dir == p || strings.HasPrefix(dir, p+"/") {
				c.Status = checkFail
				c.Detail = dir + " is inside ~/" + f + ", which macOS's privacy protection guards: programs are asked for access, or refused"
				c.Fix = "mount under ~/.branchnfs/mnt/ instead"
				return c
			}
		}
	}
	c.Status, c.Detail = checkOK, dir
	return c
}

func (o *doctorOptions) checkCongestion() doctorCheck {
	c := doctorCheck{Name: "congestion-control"}
	cc, err := o.cc()
	if err != nil {
		c.Status, c.Detail = checkSkip, err.Error()
		return c
	}
	c.Status = checkOK
	c.Detail = cc
	if cc == "bbr" {
		c.Detail += ": it paces every socket; the server switches its own loopback connections to reno (docs/design.md), so nothing to do"
	}
	return c
}

// doctorBranchPrefix names the scratch branches doctor makes.
const doctorBranchPrefix = "doctor-"

// checkFilesystem forks a scratch branch, runs the filesystem checks on
// it through a mount or the userspace client, and aborts it.
func (o *doctorOptions) checkFilesystem(ctx context.Context, c *control.Client, st control.Status) []doctorCheck {
	name := doctorBranchPrefix + strconv.Itoa(os.Getpid())
	if _, err := c.Fork(ctx, "main", name); err != nil {
		return []doctorCheck{{Name: "filesystem", Status: checkFail, Detail: "fork a scratch branch of main: " + errorMessage(err),
			Fix: "see the server's log (branchnfs service logs)"}}
	}
	var out []doctorCheck
	onMount := false
	if !o.NoMount {
		if o.fsOnMount != nil {
			onMount = o.fsOnMount(ctx)
		} else {
			onMount = canMount()
		}
	}
	switch {
	case o.Mounted != "":
		out = o.mountedDirChecks(ctx, name)
	case onMount:
		out = o.mountedChecks(ctx, st, name)
	default:
		out = userspaceChecks(st, name)
	}
	cleanup := doctorCheck{Name: "cleanup", Status: checkOK, Detail: "aborted the scratch branch " + name}
	if _, err := c.ForceAbort(ctx, name); err != nil {
		cleanup.Status, cleanup.Detail = checkWarn, "abort the scratch branch "+name+": "+errorMessage(err)
		cleanup.Fix = "branchnfs abort --force " + name
	}
	return append(out, cleanup)
}

// mountedChecks mounts the scratch branch with the OS's client in a
// temporary directory and runs fsChecks on it.
func (o *doctorOptions) mountedChecks(ctx context.Context, st control.Status, name string) []doctorCheck {
	dir, err := os.MkdirTemp("", "branchnfs-doctor-")
	if err != nil {
		return []doctorCheck{{Name: "mount", Status: checkFail, Detail: err.Error(), Fix: "make $TMPDIR writable"}}
	}
	defer os.Remove(dir)
	host := mountHost(st.Listen)
	args, err := mountArgs(o.goos, host, st.Port, control.ExportPath(name), dir)
	if err == nil {
		err = runMountCommand(ctx, args, host, st.Port, control.ExportPath(name), dir)
	}
	if err != nil {
		out := []doctorCheck{{Name: "mount", Status: checkFail, Detail: err.Error(),
			Fix: "see mount commands in README.md; doctor --no-mount checks the server without a mount"}}
		return append(out, userspaceChecks(st, name)...)
	}
	out := []doctorCheck{{Name: "mount", Status: checkOK, Detail: shellJoin(args)}}
	out = append(out, fsChecks(pathFS{dir})...)
	if err := runUmountCommand(ctx, dir, io.Discard); err != nil {
		out = append(out, doctorCheck{Name: "umount", Status: checkFail, Detail: err.Error(), Fix: staleUnmountHint})
	} else {
		out = append(out, doctorCheck{Name: "umount", Status: checkOK, Detail: dir})
	}
	return out
}

// mountedDirChecks runs fsChecks in the scratch branch's directory of
// the user's mount of the export / at --mounted, once the branch shows
// there.
func (o *doctorOptions) mountedDirChecks(ctx context.Context, name string) []doctorCheck {
	const fix = "give --mounted the directory where the export / is mounted (branchnfs mount / DIR --print shows how), with a short attribute cache (actimeo=0 or the printed options)"
	if fi, err := os.Stat(o.Mounted); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return []doctorCheck{{Name: "mount", Status: checkFail, Detail: "--mounted " + o.Mounted + ": " + err.Error(), Fix: fix}}
	}
	dir := filepath.Join(o.Mounted, name)
	deadline := time.Now().Add(o.mountedWait)
	for {
		fi, err := os.Stat(dir)
		if err == nil && fi.IsDir() {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return []doctorCheck{{Name: "mount", Status: checkFail,
				Detail: fmt.Sprintf("--mounted %s: the scratch branch %s does not show in it after %s", o.Mounted, name, o.mountedWait), Fix: fix}}
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := []doctorCheck{{Name: "mount", Status: checkOK, Detail: "already mounted: " + dir}}
	return append(out, fsChecks(pathFS{dir})...)
}

// userspaceChecks runs fsChecks through the built-in NFS client.
func userspaceChecks(st control.Status, name string) []doctorCheck {
	addr := net.JoinHostPort(mountHost(st.Listen), strconv.Itoa(st.Port))
	// The client binds a random local port and does not retry one in
	// use itself.
	rc, err := rpc.DialTCP("tcp", addr, false)
	for i := 0; i < 10 && errors.Is(err, syscall.EADDRINUSE); i++ {
		rc, err = rpc.DialTCP("tcp", addr, false)
	}
	if err != nil {
		return []doctorCheck{{Name: "nfs-connect", Status: checkFail, Detail: err.Error(), Fix: "is the server's port " + addr + " reachable? see branchnfs service logs"}}
	}
	defer rc.Close()
	m := nfsc.Mount{Client: rc}
	host, _ := os.Hostname()
	t, err := m.Mount(control.ExportPath(name), rpc.NewAuthUnix(host, uint32(os.Getuid()), uint32(os.Getgid())).Auth())
	if err != nil {
		return []doctorCheck{{Name: "nfs-mount", Status: checkFail, Detail: err.Error(), Fix: "see the server's log (branchnfs service logs)"}}
	}
	out := []doctorCheck{{Name: "nfs-mount", Status: checkOK, Detail: "userspace client (no kernel mount here): " + addr + control.ExportPath(name)}}
	return append(out, fsChecks(nfsFS{t})...)
}

// doctorFS is what the filesystem checks need: a mounted directory or
// the userspace client.
type doctorFS interface {
	WriteFile(name string, data []byte, perm os.FileMode) error // written, then synced (fsync; COMMIT)
	ReadFile(name string) ([]byte, error)
	Rename(from, to string) error
	Chmod(name string, perm os.FileMode) error
	Mode(name string) (os.FileMode, error)
	Names() ([]string, error) // of the root directory
	Symlink(target, name string) error
	Readlink(name string) (string, error)
	Remove(name string) error
	Lock(name string) error // flock and fcntl; ErrUnsupported without a mount
}

// doctorLargeFile is the size of the large-file check: several blocks,
// more than one WRITE.
const doctorLargeFile = 8 << 20

// fsChecks runs the filesystem checks in the root of fs, in a fixed
// order, and removes what they made.
func fsChecks(fs doctorFS) []doctorCheck {
	var out []doctorCheck
	run := func(name string, fn func() (string, error), fix string) bool {
		detail, err := fn()
		if errors.Is(err, errors.ErrUnsupported) {
			out = append(out, doctorCheck{Name: name, Status: checkSkip, Detail: detail})
			return true
		}
		if err != nil {
			out = append(out, doctorCheck{Name: name, Status: checkFail, Detail: err.Error(), Fix: fix})
			return false
		}
		out = append(out, doctorCheck{Name: name, Status: checkOK, Detail: detail})
		return true
	}
	const logFix = "see the server's log (branchnfs service logs) and report it with this output"
	data := []byte("branchnfs doctor\n")
	if !run("fs-write", func() (string, error) {
		return "wrote doctor.txt", fs.WriteFile("doctor.txt", data, 0o644)
	}, logFix) {
		return out
	}
	run("fs-read", func() (string, error) {
		b, err := fs.ReadFile("doctor.txt")
		if err == nil && !bytes.Equal(b, data) {
			err = fmt.Errorf("read back %q, wrote %q", b, data)
		}
		return "read it back", err
	}, logFix)
	run("fs-fsync", func() (string, error) {
		return "fsync (COMMIT) of a written file", fs.WriteFile("synced.txt", data, 0o644)
	}, logFix)
	run("fs-rename", func() (string, error) {
		if err := fs.Rename("doctor.txt", "renamed.txt"); err != nil {
			return "", err
		}
		b, err := fs.ReadFile("renamed.txt")
		if err == nil && !bytes.Equal(b, data) {
			err = fmt.Errorf("after rename, read %q", b)
		}
		return "renamed doctor.txt to renamed.txt", err
	}, logFix)
	run("fs-lock", func() (string, error) {
		err := fs.Lock("renamed.txt")
		if errors.Is(err, errors.ErrUnsupported) {
			return "flock and fcntl locks need a kernel mount (NFSv3 locks go through the client's lock manager)", err
		}
		return "flock and fcntl (F_SETLK) on renamed.txt", err
	}, "mount with the options branchnfs mount --print shows (locallocks on macOS, nolock on Linux)")
	run("fs-chmod", func() (string, error) {
		if err := fs.Chmod("renamed.txt", 0o600); err != nil {
			return "", err
		}
		m, err := fs.Mode("renamed.txt")
		if err == nil && m.Perm() != 0o600 {
			err = fmt.Errorf("mode %04o after chmod 0600", m.Perm())
		}
		return "chmod 0600", err
	}, logFix)
	run("fs-unicode", func() (string, error) {
		nfd, nfc := "cafe\u0301.txt", "caf\u00e9.txt"
		if err := fs.WriteFile(nfd, data, 0o644); err != nil {
			return "", err
		}
		b, err := fs.ReadFile(nfc)
		if err != nil {
			return "", fmt.Errorf("created the NFD name, open by the NFC name: %w", err)
		}
		if !bytes.Equal(b, data) {
			return "", fmt.Errorf("the NFC name read %q", b)
		}
		names, err := fs.Names()
		if err != nil {
			return "", err
		}
		for _, n := range names {
			if n == nfd {
				return "created NFD, opened NFC, listed as created", fs.Remove(nfc)
			}
		}
		return "", fmt.Errorf("listing shows %q, not the NFD spelling it was created with", names)
	}, "names are stored as sent and compared in NFC (docs/design.md); report it with this output")
	run("fs-large-file", func() (string, error) {
		big := make([]byte, doctorLargeFile)
		for i := range big {
			big[i] = byte(i*7 + i>>13)
		}
		if err := fs.WriteFile("large.bin", big, 0o644); err != nil {
			return "", err
		}
		b, err := fs.ReadFile("large.bin")
		if err == nil && !bytes.Equal(b, big) {
			err = fmt.Errorf("read back %d bytes that differ from the %d written", len(b), len(big))
		}
		return fmt.Sprintf("wrote and read back %s", kv.FormatBytes(doctorLargeFile)), err
	}, logFix)
	run("fs-symlink", func() (string, error) {
		if err := fs.Symlink("renamed.txt", "link"); err != nil {
			return "", err
		}
		tgt, err := fs.Readlink("link")
		if err == nil && tgt != "renamed.txt" {
			err = fmt.Errorf("readlink gave %q", tgt)
		}
		return "symlink and readlink", err
	}, logFix)
	for _, n := range []string{"renamed.txt", "synced.txt", "large.bin", "link"} {
		fs.Remove(n)
	}
	return out
}

// pathFS is a doctorFS on a mounted directory.
type pathFS struct{ dir string }

func (p pathFS) path(n string) string { return filepath.Join(p.dir, n) }

func (p pathFS) WriteFile(name string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(p.path(name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
func (p pathFS) ReadFile(name string) ([]byte, error)      { return os.ReadFile(p.path(name)) }
func (p pathFS) Rename(from, to string) error              { return os.Rename(p.path(from), p.path(to)) }
func (p pathFS) Chmod(name string, perm os.FileMode) error { return os.Chmod(p.path(name), perm) }
func (p pathFS) Symlink(target, name string) error         { return os.Symlink(target, p.path(name)) }
func (p pathFS) Readlink(name string) (string, error)      { return os.Readlink(p.path(name)) }
func (p pathFS) Remove(name string) error                  { return os.Remove(p.path(name)) }
func (p pathFS) Mode(name string) (os.FileMode, error) {
	fi, err := os.Stat(p.path(name))
	if err != nil {
		return 0, err
	}
	return fi.Mode(), nil
}
func (p pathFS) Names() ([]string, error) {
	es, err := os.ReadDir(p.dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names, err
}
func (p pathFS) Lock(name string) error {
	f, err := os.OpenFile(p.path(name), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("flock: %w", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		return fmt.Errorf("fcntl F_SETLK: %w", err)
	}
	lk.Type = unix.F_UNLCK
	unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	return nil
}

// nfsFS is a doctorFS through the userspace NFS client.
type nfsFS struct{ t *nfsc.Target }

func (n nfsFS) WriteFile(name string, data []byte, perm os.FileMode) error {
	f, err := n.t.OpenFile(name, perm)
	if err != nil {
		return err
	}
	for len(data) > 0 {
		w, err := f.Write(data)
		if err != nil {
			f.Close()
			return err
		}
		data = data[w:]
	}
	return f.Close() // COMMIT
}
func (n nfsFS) ReadFile(name string) ([]byte, error) {
	f, err := n.t.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
func (n nfsFS) Rename(from, to string) error { return n.t.Rename(from, to) }
func (n nfsFS) Chmod(name string, perm os.FileMode) error {
	return n.t.Setattr(name, nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: uint32(perm.Perm())}})
}
func (n nfsFS) Mode(name string) (os.FileMode, error) {
	a, err := n.t.Getattr(name)
	if err != nil {
		return 0, err
	}
	return os.FileMode(a.FileMode & 0o777), nil
}
func (n nfsFS) Names() ([]string, error) {
	es, err := n.t.ReadDirPlus(".")
	var names []string
	for _, e := range es {
		if e.FileName != "." && e.FileName != ".." {
			names = append(names, e.FileName)
		}
	}
	return names, err
}
func (n nfsFS) Symlink(target, name string) error { return n.t.Symlink(target, name) }
func (n nfsFS) Readlink(name string) (string, error) {
	f, err := n.t.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return f.Readlink()
}
func (n nfsFS) Remove(name string) error { return n.t.Remove(name) }
func (n nfsFS) Lock(string) error        { return errors.ErrUnsupported }

// diskFree returns the bytes an unprivileged user may still write on
// dir's filesystem.
func diskFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

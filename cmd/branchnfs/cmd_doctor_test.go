package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

func TestDoctorStoreDir(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mode   os.FileMode
		status string
		detail string
	}{
		{"private", 0o700, checkOK, "mode 0700"},
		{"world-writable", 0o777, checkFail, "is writable by other users (mode 0777)"},
		{"group-writable", 0o770, checkFail, "is writable by other users (mode 0770)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			c := checkStoreDir(dir)
			if c.Status != tt.status || !strings.Contains(c.Detail, tt.detail) || (tt.status == checkFail && !strings.Contains(c.Fix, "chmod go-w "+dir)) {
				t.Fatalf("%+v", c)
			}
		})
	}
	// A store that does not exist yet, under a directory others can write.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	if c := checkStoreDir(filepath.Join(open, "s")); c.Status != checkFail || !strings.Contains(c.Detail, "above the store, is writable by other users") {
		t.Fatalf("store under a world-writable directory: %+v", c)
	}
	if c := checkStoreDir(filepath.Join(t.TempDir(), "none")); c.Status != checkWarn {
		t.Fatalf("missing store: %+v", c)
	}
}

// doctor fails a store directory of another user, as every command
// refuses it. Run as a user who is not root (root administers the stores
// of others).
func TestDoctorStoreDirOfAnotherUser(t *testing.T) {
	if os.Geteuid() == 0 {
		alien := filepath.Join(testbin.SharedTempDir(t, "bnfs-alien"), "alien")
		if err := os.Mkdir(alien, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(alien, testbin.UnprivilegedUID+1, testbin.UnprivilegedUID+1); err != nil {
			t.Fatal(err)
		}
		t.Setenv(foreignDirEnv, alien)
	}
	testbin.PassesUnprivileged(t, "TestDoctorStoreDirOfAnotherUser", "TestDoctorStoreDirOfAnotherUser", func(t *testing.T) {
		foreign := os.Getenv(foreignDirEnv)
		testbin.Prerequisite(t, foreign != "", "no directory of another user", "run the tests as root, which makes one")
		if c := checkStoreDir(foreign); c.Status != checkFail || !strings.Contains(c.Detail, fmt.Sprintf("is owned by uid %d", testbin.UnprivilegedUID+1)) || !strings.Contains(c.Fix, "chown") {
			t.Fatalf("%+v", c)
		}
	})
}

func TestDoctorDisk(t *testing.T) {
	for _, tt := range []struct {
		free   uint64
		err    error
		status string
	}{
		{10 << 30, nil, checkOK},
		{800 << 20, nil, checkWarn},
		{400 << 20, nil, checkFail}, // writes fail
		{100 << 20, nil, checkFail}, // read-only
		{0, errors.New("no statfs"), checkSkip},
	} {
		o := &doctorOptions{Reserve: "512MiB", diskFree: func(string) (uint64, error) { return tt.free, tt.err }}
		c := o.checkDisk(t.TempDir())
		if c.Status != tt.status || (c.Status == checkFail && !strings.Contains(c.Fix, "--reserve")) {
			t.Errorf("free %d: %+v, want %s", tt.free, c, tt.status)
		}
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

// TestDoctorStaleMounts: a mount of a stopped server (a mountinfo line
// whose port answers nothing) fails the check; one whose server answers
// passes; other filesystems and remote NFS are left alone.
func TestDoctorStaleMounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	live := ln.Addr().(*net.TCPAddr).Port
	dead := freePort(t)
	line := func(id int, dir string, src string, port int) string {
		return fmt.Sprintf("%d 25 0:%d / %s rw,relatime shared:1 - nfs %s rw,vers=3,proto=tcp,port=%d,mountport=%d,addr=127.0.0.1\n", id, id, dir, src, port, port)
	}
	base := "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"40 22 0:40 / /mnt/far rw - nfs 10.0.0.1:/x rw,vers=3,port=2049\n"
	o := &doctorOptions{goos: "linux"}
	o.ensureDefaults()
	o.mountinfo = func() (string, error) { return base + line(41, `/home/me/my\040mnt`, "127.0.0.1:/", live), nil }
	if c := o.checkStaleMounts("", true, live); c.Status != checkOK || !strings.Contains(c.Detail, "1 loopback") {
		t.Fatalf("answering mount: %+v", c)
	}
	o.mountinfo = func() (string, error) {
		return base + line(41, `/home/me/my\040mnt`, "127.0.0.1:/", live) + line(42, "/home/me/old", "localhost:/main", dead), nil
	}
	c := o.checkStaleMounts("", false, 0)
	if c.Status != checkFail || !strings.Contains(c.Detail, "/home/me/old") || strings.Contains(c.Detail, "my mnt") || !strings.Contains(c.Fix, "umount") {
		t.Fatalf("stale mount: %+v", c)
	}
	o.mountinfo = func() (string, error) { return "", errors.New("no /proc") }
	if c := o.checkStaleMounts("", false, 0); c.Status != checkSkip {
		t.Fatalf("unreadable table: %+v", c)
	}

	// macOS: mount's output has no port; with no server, a loopback NFS
	// mount is stale.
	mac := "/dev/disk3s1s1 on / (apfs, sealed, local, read-only, journaled)\n" +
		"127.0.0.1:/ on /Users/me/.branchnfs/mnt/all (nfs, nodev, nosuid, mounted by me)\n"
	o = &doctorOptions{goos: "darwin", mountinfo: func() (string, error) { return mac, nil }}
	o.ensureDefaults()
	if c := o.checkStaleMounts("", false, 0); c.Status != checkFail || !strings.Contains(c.Detail, "/Users/me/.branchnfs/mnt/all") {
		t.Fatalf("macOS stale mount: %+v", c)
	}
	if c := o.checkStaleMounts("", true, 0); c.Status != checkOK {
		t.Fatalf("macOS mount with the server running: %+v", c)
	}
}

func TestDoctorMountPoint(t *testing.T) {
	for _, tt := range []struct {
		goos, dir, status string
	}{
		{"darwin", "/Users/me/Documents/work", checkFail},
		{"darwin", "/Users/me/Library/Mobile Documents/x", checkFail},
		{"darwin", "/Users/me/Desktop", checkFail},
		{"darwin", "/Users/me/.branchnfs/mnt/all", checkOK},
		{"darwin", "", checkOK}, // the suggested place
		{"linux", "/home/me/Documents/work", checkOK},
	} {
		o := &doctorOptions{goos: tt.goos, home: "/Users/me", MountDir: tt.dir}
		if c := o.checkMountPoint(""); c.Status != tt.status || (c.Status == checkFail && !strings.Contains(c.Fix, "~/.branchnfs/mnt")) {
			t.Errorf("%s %q: %+v, want %s", tt.goos, tt.dir, c, tt.status)
		}
	}
}

func TestDoctorCongestion(t *testing.T) {
	o := &doctorOptions{cc: func() (string, error) { return "bbr", nil }}
	if c := o.checkCongestion(); c.Status != checkOK || !strings.Contains(c.Detail, "reno") {
		t.Fatalf("%+v", c)
	}
	o.cc = func() (string, error) { return "", errors.New("not applicable on macOS") }
	if c := o.checkCongestion(); c.Status != checkSkip {
		t.Fatalf("%+v", c)
	}
}

// memFS is a doctorFS in memory, with faults.
type memFS struct {
	files    map[string][]byte
	modes    map[string]os.FileMode
	links    map[string]string
	fail     string // the operation that fails
	foldsNFC bool   // names compare in NFC
}

func newMemFS() *memFS {
	return &memFS{files: map[string][]byte{}, modes: map[string]os.FileMode{}, links: map[string]string{}, foldsNFC: true}
}

func (m *memFS) key(n string) string {
	if m.foldsNFC {
		return strings.ReplaceAll(n, "e\u0301", "\u00e9")
	}
	return n
}
func (m *memFS) err(op string) error {
	if m.fail == op {
		return fmt.Errorf("%s: input/output error", op)
	}
	return nil
}
func (m *memFS) WriteFile(n string, d []byte, p os.FileMode) error {
	if err := m.err("write"); err != nil {
		return err
	}
	m.files[m.key(n)] = append([]byte(nil), d...)
	m.modes[m.key(n)] = p
	m.links[m.key(n)+"\x00name"] = n
	return nil
}
func (m *memFS) ReadFile(n string) ([]byte, error) {
	if d, ok := m.files[m.key(n)]; ok {
		if m.fail == "read" {
			return append(d[:len(d)-1:len(d)-1], 'X'), nil
		}
		return d, nil
	}
	return nil, os.ErrNotExist
}
func (m *memFS) Rename(a, b string) error {
	if err := m.err("rename"); err != nil {
		return err
	}
	m.files[m.key(b)], m.modes[m.key(b)] = m.files[m.key(a)], m.modes[m.key(a)]
	delete(m.files, m.key(a))
	return nil
}
func (m *memFS) Chmod(n string, p os.FileMode) error {
	if m.fail != "chmod" {
		m.modes[m.key(n)] = p
	}
	return nil
}
func (m *memFS) Mode(n string) (os.FileMode, error) { return m.modes[m.key(n)], nil }
func (m *memFS) Names() ([]string, error) {
	var out []string
	for k := range m.files {
		if n, ok := m.links[k+"\x00name"]; ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}
func (m *memFS) Symlink(t, n string) error {
	if err := m.err("symlink"); err != nil {
		return err
	}
	m.links[n] = t
	return nil
}
func (m *memFS) Readlink(n string) (string, error) { return m.links[n], nil }
func (m *memFS) Remove(n string) error             { delete(m.files, m.key(n)); return nil }
func (m *memFS) Lock(string) error {
	if m.fail == "lock" {
		return errors.New("fcntl F_SETLK: no locks available")
	}
	return nil
}

// TestDoctorFSChecks: each filesystem check fails when its operation
// misbehaves, with a fix, and passes otherwise.
func TestDoctorFSChecks(t *testing.T) {
	statuses := func(cs []doctorCheck) map[string]string {
		m := map[string]string{}
		for _, c := range cs {
			m[c.Name] = c.Status
			if c.Status == checkFail && c.Fix == "" {
				t.Errorf("%s fails without a fix: %+v", c.Name, c)
			}
		}
		return m
	}
	all := statuses(fsChecks(newMemFS()))
	for _, n := range []string{"fs-write", "fs-read", "fs-fsync", "fs-rename", "fs-lock", "fs-chmod", "fs-unicode", "fs-large-file", "fs-symlink"} {
		if all[n] != checkOK {
			t.Errorf("healthy filesystem: %s is %q", n, all[n])
		}
	}
	for _, tt := range []struct{ fail, check string }{
		{"read", "fs-read"}, {"rename", "fs-rename"}, {"lock", "fs-lock"}, {"chmod", "fs-chmod"},
		{"symlink", "fs-symlink"}, {"nfc", "fs-unicode"},
	} {
		m := newMemFS()
		m.fail = tt.fail
		if tt.fail == "nfc" {
			m.foldsNFC = false
		}
		if got := statuses(fsChecks(m))[tt.check]; got != checkFail {
			t.Errorf("%s failing: %s is %q, want fail", tt.fail, tt.check, got)
		}
	}
	m := newMemFS()
	m.fail = "write"
	if cs := fsChecks(m); len(cs) != 1 || cs[0].Status != checkFail {
		t.Errorf("write failing: %+v, want fs-write failed and nothing after it", cs)
	}
}

// TestDoctorPathFS: on a local directory (not form-insensitive), every
// check but the NFC/NFD one passes, locks included.
func TestDoctorPathFS(t *testing.T) {
	got := map[string]doctorCheck{}
	for _, c := range fsChecks(pathFS{t.TempDir()}) {
		got[c.Name] = c
	}
	for n, c := range got {
		want := checkOK
		if n == "fs-unicode" {
			want = checkFail
		}
		if c.Status != want {
			t.Errorf("%s: %+v, want %s", n, c, want)
		}
	}
	if len(got) != 9 {
		t.Errorf("%d checks, want 9: %v", len(got), got)
	}
}

// TestDoctorAsUser runs doctor as a regular user: with no server it
// reports the rest and exits 0; with the user's server it checks the
// filesystem through the userspace client on a scratch branch it
// removes; with a world-writable store directory it exits 1.
func TestDoctorAsUser(t *testing.T) {
	bin := branchnfsBinary(t)
	home := userDir(t, "bnfs-doctor-")
	store := filepath.Join(home, "store")
	env := []string{"HOME=" + home}
	code, out, _ := runAs(t, bin, env, "doctor", "--json", "--store", store)
	var rep doctorReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.OK {
		t.Fatalf("doctor without a server: %d %q", code, out)
	}
	byName := func(r doctorReport) map[string]doctorCheck {
		m := map[string]doctorCheck{}
		for _, c := range r.Checks {
			m[c.Name] = c
		}
		return m
	}
	if c := byName(rep); c["server"].Status != checkWarn || c["filesystem"].Status != checkSkip {
		t.Fatalf("doctor without a server: %q", out)
	}

	srv := testbin.StartServer(t, bin, store, testbin.ServerOptions{User: asUser(), Env: env})
	code, out, _ = runAs(t, bin, env, "doctor", "--json", "--store", store)
	rep = doctorReport{}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.OK {
		t.Fatalf("doctor with a server: %d %q", code, out)
	}
	c := byName(rep)
	for _, n := range []string{"version", "server", "store-dir", "disk-space", "stale-mounts", "mount-point", "nfs-mount",
		"fs-write", "fs-read", "fs-fsync", "fs-rename", "fs-chmod", "fs-unicode", "fs-large-file", "fs-symlink", "cleanup"} {
		if c[n].Status != checkOK {
			t.Errorf("%s: %+v", n, c[n])
		}
	}
	if c["fs-lock"].Status != checkSkip {
		t.Errorf("fs-lock through the userspace client: %+v", c["fs-lock"])
	}
	code, out, _ = runAs(t, bin, env, "list", "--json", "--store", store)
	if code != 0 || strings.Contains(out, doctorBranchPrefix) {
		t.Fatalf("the scratch branch is left: %q", out)
	}
	// Without --store, doctor checks the installed service's store.
	spec := serviceSpec{Binary: bin, Args: serveArgs(store, "", "", "")}
	unit, unitText := filepath.Join(home, ".config", "systemd", "user", serviceUnitName), systemdUnit(spec)
	if runtime.GOOS == "darwin" {
		unit, unitText = filepath.Join(home, "Library", "LaunchAgents", serviceLabel+".plist"), launchdPlist(spec)
	}
	if err := os.MkdirAll(filepath.Dir(unit), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unit, unitText, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runAs(t, bin, append(env, "BRANCHNFS_STORE=", "XDG_CONFIG_HOME="), "doctor", "--json")
	rep = doctorReport{}
	if json.Unmarshal([]byte(out), &rep) != nil || rep.Store != store || byName(rep)["service"].Status == "" || byName(rep)["fs-write"].Status != checkOK {
		t.Fatalf("doctor with a service installed, without --store: %d %q", code, out)
	}
	os.Remove(unit)

	code, text, _ := runAs(t, bin, env, "doctor", "--store", store)
	if code != 0 || !strings.Contains(text, "[ok]   fs-large-file") || !strings.Contains(text, "0 fail") {
		t.Fatalf("doctor text: %d %q", code, text)
	}

	if err := os.Chmod(store, 0o777); err != nil {
		t.Fatal(err)
	}
	code, text, stderr := runAs(t, bin, env, "doctor", "--store", store)
	if code != exitError || !strings.Contains(text, "[fail] store-dir") || !strings.Contains(text, "fix: run `chmod go-w "+store) || !strings.Contains(stderr, "check failed") {
		t.Fatalf("doctor on a world-writable store: %d %q %q", code, text, stderr)
	}
	os.Chmod(store, 0o700)
	srv.Stop(t)
}

// TestDoctorMounted: doctor reaches the user's server through a TCP
// forward of its control socket ($BRANCHNFS_CONTROL and its token, as in
// a VM) and, with --mounted, runs the filesystem checks in DIR/BRANCH of
// the mount it is given (here a plain directory standing in for a mount
// of the export /, with the scratch branch's directory made ahead), then
// aborts the branch. When the branch never shows there, the mount check
// fails with the fix; without a server on $BRANCHNFS_CONTROL, the server
// check names it.
func TestDoctorMounted(t *testing.T) {
	bin := branchnfsBinary(t)
	home := userDir(t, "bnfs-doctor-mounted-")
	store := filepath.Join(home, "store")
	testbin.StartServer(t, bin, store, testbin.ServerOptions{User: asUser(), Env: []string{"HOME=" + home}})
	token, err := control.ReadToken(control.TokenPath(store))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BRANCHNFS_CONTROL", "tcp://127.0.0.1:"+strconv.Itoa(testbin.ForwardUnix(t, control.SocketPath(store))))
	t.Setenv("BRANCHNFS_CONTROL_TOKEN", token)
	t.Setenv("BRANCHNFS_STORE", "")

	mnt := t.TempDir()
	name := doctorBranchPrefix + strconv.Itoa(os.Getpid())
	if err := os.Mkdir(filepath.Join(mnt, name), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := func(mounted string) *doctorOptions {
		return &doctorOptions{
			globalOptions: &globalOptions{Store: filepath.Join(t.TempDir(), "no-store-here")},
			Reserve:       "1MiB", Mounted: mounted, home: t.TempDir(), mountedWait: 300 * time.Millisecond,
			mountinfo: func() (string, error) { return "", nil },
		}
	}
	rep := doctor(t.Context(), opts(mnt))
	got := map[string]doctorCheck{}
	for _, c := range rep.Checks {
		got[c.Name] = c
	}
	for _, n := range []string{"server", "mount", "fs-write", "fs-read", "fs-fsync", "fs-rename", "fs-lock", "fs-chmod", "fs-large-file", "fs-symlink", "cleanup"} {
		if got[n].Status != checkOK {
			t.Errorf("%s: %+v", n, got[n])
		}
	}
	// The store is the server's, not on this machine.
	if got["store-dir"].Status != checkSkip || got["disk-space"].Status != checkSkip || rep.Store != store {
		t.Errorf("store checks through $BRANCHNFS_CONTROL: %+v %+v, store %q", got["store-dir"], got["disk-space"], rep.Store)
	}
	if !strings.Contains(got["mount"].Detail, filepath.Join(mnt, name)) {
		t.Errorf("mount: %+v, want the checks in %s", got["mount"], filepath.Join(mnt, name))
	}
	// A plain directory is not form-insensitive: the one check that
	// tells it from the server.
	if got["fs-unicode"].Status != checkFail {
		t.Errorf("fs-unicode on a plain directory: %+v", got["fs-unicode"])
	}
	if _, err := os.Stat(filepath.Join(mnt, name, "large.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("large.bin left in the mount: %v", err)
	}
	if _, ok := got["nfs-mount"]; ok {
		t.Errorf("--mounted also checked through the userspace client: %+v", got["nfs-mount"])
	}
	c, _, err := control.Dial(t.Context(), os.Getenv("BRANCHNFS_CONTROL"), dialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bs, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.Name == name && b.State != branches.StateAborted {
			t.Errorf("the scratch branch is left: %+v", b)
		}
	}

	// The branch does not show in the directory given.
	rep = doctor(t.Context(), opts(t.TempDir()))
	got = map[string]doctorCheck{}
	for _, c := range rep.Checks {
		got[c.Name] = c
	}
	if rep.OK || got["mount"].Status != checkFail || !strings.Contains(got["mount"].Detail, "does not show") ||
		!strings.Contains(got["mount"].Fix, "export /") || got["cleanup"].Status != checkOK || got["fs-write"].Status != "" {
		t.Errorf("--mounted where the branch does not show: %+v", rep.Checks)
	}

	// No server on $BRANCHNFS_CONTROL.
	t.Setenv("BRANCHNFS_CONTROL", "tcp://127.0.0.1:"+strconv.Itoa(freePort(t)))
	rep = doctor(t.Context(), opts(mnt))
	got = map[string]doctorCheck{}
	for _, c := range rep.Checks {
		got[c.Name] = c
	}
	if got["server"].Status != checkWarn || !strings.Contains(got["server"].Detail, "$BRANCHNFS_CONTROL=tcp://127.0.0.1:") ||
		!strings.Contains(got["server"].Fix, "$BRANCHNFS_CONTROL") || got["filesystem"].Status != checkSkip {
		t.Errorf("no server on $BRANCHNFS_CONTROL: %+v", rep.Checks)
	}
}

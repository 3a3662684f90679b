package kernel

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The regular user of testdata/user.sh: the guest's as_user runs commands
// as uid 1000 gid 1000, and the server runs as the same ids on the host.
const regularUID, regularGID = 1000, 1000

// TestKernelRegularUser runs testdata/user.sh: the server and every CLI
// command run as uid 1000 on a store that user creates with `init`, and in
// the guest a process as uid 1000 creates, edits and chmods files in a
// mount of main, forks, commits and aborts.
func TestKernelRegularUser(t *testing.T) {
	img, helper, srv := regularUserSetup(t)
	cli := func(args ...string) hostAction {
		return func(extra []string) error {
			_, err := srv.cli(append(args, extra...)...)
			return err
		}
	}
	actions := map[string]hostAction{
		"fork":   cli("fork"),
		"commit": cli("commit"),
		"abort":  cli("abort"),
		"diff":   cli("diff"),
		"list":   cli("list"),
	}
	opts, err := srv.linuxMountOptions("main")
	if err != nil {
		t.Fatal(err)
	}
	runScenario(t, "user", srv, img, helper, map[string]string{"MOUNT_OPTS": opts}, actions, 5*time.Minute)
}

// regularUserSetup checks the prerequisites and returns the guest image,
// the mount helper and a started server that runs, with every CLI command,
// as uid 1000 on a store that user created with `init`.
func regularUserSetup(t *testing.T) (*guestImage, string, *nfsServer) {
	t.Helper()
	if os.Getenv("BRANCHNFS_KERNEL_SERVER") != "" {
		t.Skip("regular-user scenarios need the real branchnfs server (BRANCHNFS_KERNEL_SERVER is set)")
	}
	img, helper, root := setup(t) // checks the prerequisites and builds the binaries
	if err := root.stop(); err != nil {
		t.Fatal(err)
	}
	cred := &syscall.Credential{Uid: regularUID, Gid: regularGID, Groups: []uint32{regularGID}}
	if os.Geteuid() != 0 {
		// Not root: the server runs as the user running the tests, and the
		// guest's uid 1000 must match it.
		if os.Geteuid() != regularUID {
			prerequisite(t, "run as root or as uid %d (the guest's regular user), not uid %d", regularUID, os.Geteuid())
		}
		cred = nil
	}
	dir, err := os.MkdirTemp("", "bnfs-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, regularUID, regularGID); err != nil {
			t.Fatal(err)
		}
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := &nfsServer{t: t, bin: root.bin, store: filepath.Join(dir, "store"), port: port,
		logPath: filepath.Join(t.TempDir(), "server.log"), cred: cred}
	if _, err := srv.cli("init"); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(srv.store, &st); err != nil || st.Uid != regularUID {
		t.Fatalf("the store %s belongs to uid %d (%v), want %d", srv.store, st.Uid, err, regularUID)
	}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", srv.logTail(60))
		}
	})
	return img, helper, srv
}

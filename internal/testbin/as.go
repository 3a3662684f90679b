package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// UnprivilegedUID is the user tests run as when they must not be root: no
// account needs to exist for it.
const UnprivilegedUID = 54321

// RunTestAs runs test (a top-level test of the current test binary) in a
// copy of the binary, as uid (and gid uid), with env added, and returns its
// combined output. It needs root.
func RunTestAs(t *testing.T, uid uint32, test string, env ...string) ([]byte, error) {
	t.Helper()
	return CommandAs(t, uid, test, env...).CombinedOutput()
}

// CommandAs is the command RunTestAs runs, not started: for a test that
// talks to it while it runs.
func CommandAs(t *testing.T, uid uint32, test string, env ...string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(SharedTempDir(t, "bnfs-as"), filepath.Base(os.Args[0]))
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd
}

// Unprivileged runs fn as a user who is not root: directly when the tests
// are not root, else by running test (the calling top-level test, whose
// name is t.Name()) again as UnprivilegedUID, which must report its
// subtest (or test) want passed, not skipped. fn runs only in that second
// process then, where it is not root.
func Unprivileged(t *testing.T, want string, fn func(*testing.T)) {
	t.Helper()
	PassesUnprivileged(t, strings.SplitN(t.Name(), "/", 2)[0], want, fn)
}

package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// knownFailures lists the steps that fail through the kernel client only
// because of NFSv3 protocol gaps of the server, with
// the reason. It is checked both ways: a listed step that passes fails the
// run (so the table only shrinks), and an unlisted failing step fails it.
// Keys are "Test/step". It applies to the real branchnfs server only.
var knownFailures = map[string]string{}

// prerequisite skips the test with the reason, or fails it under CI=true,
// where a missing prerequisite must not pass silently.
func prerequisite(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("kernel-client tests cannot run (CI=true): %s", msg)
	}
	t.Skipf("kernel-client tests skipped: %s", msg)
}

var (
	imageOnce sync.Once
	image     *guestImage
	imageErr  error
)

// setup checks the prerequisites and returns the guest image, the mount
// helper and a started server with a fresh store.
func setup(t testing.TB) (*guestImage, string, *nfsServer) {
	t.Helper()
	img, _ := guestPrerequisites(t)
	bin, helper, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(t, bin)
	if err != nil {
		t.Fatal(err)
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

// guestPrerequisites checks the prerequisites and returns the guest image
// and the guest's mount helper.
func guestPrerequisites(t testing.TB) (*guestImage, string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		prerequisite(t, "qemu-system-x86_64 not found (Debian: apt-get install -y --no-install-recommends qemu-system-x86)")
	}
	imageOnce.Do(func() {
		start := time.Now()
		image, imageErr = prepareImage(t)
		t.Logf("guest image ready in %v", time.Since(start).Round(time.Millisecond))
	})
	if imageErr != nil {
		prerequisite(t, "cannot build the guest image from Debian packages: %v", imageErr)
	}
	_, helper, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	return image, helper
}

// runScenario boots the guest with testdata/NAME.sh and reports each of its
// steps as a subtest, applying knownFailures.
func runScenario(t *testing.T, name string, srv *nfsServer, img *guestImage, helper string, env map[string]string, actions map[string]hostAction, timeout time.Duration, files ...guestFile) {
	t.Helper()
	script, err := os.ReadFile("testdata/" + name + ".sh")
	if err != nil {
		t.Fatal(err)
	}
	steps := scenarioSteps(string(script))
	if len(steps) == 0 {
		t.Fatalf("testdata/%s.sh declares no steps", name)
	}
	if env == nil {
		env = map[string]string{}
	}
	env["NFS_PORT"] = strconv.Itoa(srv.port)
	res := bootGuest(t, img, helper, string(script), env, actions, nil, timeout, files...)
	// Report steps in the order they ran; unreported ones last.
	order := func(step string) int {
		if r := res.steps[step]; r != nil {
			return r.seq
		}
		return len(res.steps)
	}
	sort.SliceStable(steps, func(i, j int) bool { return order(steps[i]) < order(steps[j]) })
	t.Logf("%s: boot %v, total %v", name, res.boot.Round(time.Millisecond), res.total.Round(time.Millisecond))
	if res.err != nil {
		t.Errorf("guest: %v", res.err)
	}
	oracle := oracleSteps(string(script))
	if len(oracle) > 0 {
		// The oracle runs the same steps on the guest's tmpfs: a failure
		// there is a bug of the scenario, never excused by knownFailures.
		t.Run("tmpfs", func(t *testing.T) {
			for _, step := range oracle {
				t.Run(step, func(t *testing.T) {
					switch r := res.steps["tmpfs/"+step]; {
					case r == nil:
						t.Errorf("step not reported by the guest")
					case r.pass:
						t.Logf("PASS in %v", r.took.Round(time.Millisecond))
					default:
						t.Errorf("FAIL on tmpfs in %v: %s", r.took.Round(time.Millisecond), r.detail)
					}
				})
			}
		})
	}
	for _, step := range steps {
		key := t.Name() + "/" + step
		t.Run(step, func(t *testing.T) {
			reason, known := knownFailures[key]
			if !srv.isBranchnfs() {
				known = false
			}
			msg, ok := verdict(res.steps[step], known, reason)
			if !ok {
				t.Error(msg)
			} else {
				t.Log(msg)
			}
		})
	}
	for got := range res.steps {
		if !contains(steps, got) && !contains(oracle, strings.TrimPrefix(got, "tmpfs/")) {
			t.Errorf("guest reported undeclared step %q", got)
		}
	}
	for key := range knownFailures {
		if strings.HasPrefix(key, t.Name()+"/") && !contains(steps, strings.TrimPrefix(key, t.Name()+"/")) {
			t.Errorf("knownFailures lists %q, which the scenario does not declare", key)
		}
	}
	var timing strings.Builder
	fmt.Fprintf(&timing, "%s timing: boot %v", name, res.boot.Round(100*time.Millisecond))
	for _, step := range append(prefixed("tmpfs/", oracle), steps...) {
		if r := res.steps[step]; r != nil {
			fmt.Fprintf(&timing, ", %s %v", step, r.took.Round(100*time.Millisecond))
		}
	}
	fmt.Fprintf(&timing, ", total %v", res.total.Round(100*time.Millisecond))
	t.Log(timing.String())
	if t.Failed() {
		t.Logf("guest console (end):\n%s", res.consoleTail(60))
	}
}

// verdict judges one step's result against the known-failures table: a
// step passes the test when it passed and is not listed, or failed and is
// listed. A step the guest never reported always fails the test.
func verdict(r *stepResult, known bool, reason string) (msg string, ok bool) {
	switch {
	case r == nil:
		return "step not reported by the guest", false
	case r.pass && known:
		return fmt.Sprintf("passes (%v) but is listed in knownFailures (%q): remove it from the table", r.took.Round(time.Millisecond), reason), false
	case r.pass:
		return fmt.Sprintf("PASS in %v: %s", r.took.Round(time.Millisecond), r.detail), true
	case known:
		return fmt.Sprintf("known failure (%s) in %v: %s", reason, r.took.Round(time.Millisecond), r.detail), true
	default:
		return fmt.Sprintf("FAIL in %v: %s", r.took.Round(time.Millisecond), r.detail), false
	}
}

func prefixed(prefix string, list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = prefix + s
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestKernelPOSIX runs the POSIX scenarios of testdata/posix.sh in one boot,
// on a mount of branch main.
func TestKernelPOSIX(t *testing.T) {
	img, helper, srv := setup(t)
	opts, err := srv.linuxMountOptions("main")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EXPORT": srv.exportPath("main"), "MOUNT_OPTS": opts}
	runScenario(t, "posix", srv, img, helper, env, nil, 9*time.Minute)
}

// TestKernelBranches runs testdata/branch.sh: forks, commit, abort and a
// server restart driven from the host while the guest has them mounted.
func TestKernelBranches(t *testing.T) {
	img, helper, srv := setup(t)
	if !srv.isBranchnfs() {
		t.Skip("branch scenarios need the real branchnfs server (BRANCHNFS_KERNEL_SERVER is set)")
	}
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
		"stop":   func([]string) error { return srv.stop() },
		"kill9":  func([]string) error { return srv.kill() },
		"start":  func([]string) error { return srv.start() },
	}
	opts, err := srv.linuxMountOptions("main")
	if err != nil {
		t.Fatal(err)
	}
	runScenario(t, "branch", srv, img, helper, map[string]string{"MOUNT_OPTS": opts}, actions, 5*time.Minute)
}

package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

var rewriteService = flag.Bool("service.rewrite", false, "rewrite testdata/service from the generators")

// goldenSpec is the service of the golden files: a store path with a
// space and a dollar sign, to show the quoting.
var goldenSpec = serviceSpec{
	Binary: "/usr/local/bin/branchnfs",
	Args:   serveArgs("/home/me/my $store", "127.0.0.1:12049", "/home/me/.branchnfs/mnt/all", ""),
	LogDir: "/Users/me/Library/Logs/branchnfs",
}

func TestServiceFilesGolden(t *testing.T) {
	for _, tt := range []struct {
		file string
		gen  func(serviceSpec) []byte
	}{
		{serviceUnitName, systemdUnit},
		{serviceLabel + ".plist", launchdPlist},
	} {
		t.Run(tt.file, func(t *testing.T) {
			got := tt.gen(goldenSpec)
			path := filepath.Join("testdata", "service", tt.file)
			if *rewriteService {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs from %s (go test -run TestServiceFilesGolden -service.rewrite updates it):\n%s", tt.file, path, got)
			}
			args, err := serviceArgsOf(got)
			if err != nil || !reflect.DeepEqual(args, append([]string{goldenSpec.Binary}, goldenSpec.Args...)) {
				t.Fatalf("arguments read back: %q, %v", args, err)
			}
		})
	}
}

// TestPackagedUnit: the unit the packages carry is the generator's.
func TestPackagedUnit(t *testing.T) {
	path := filepath.Join("..", "..", "packaging", "systemd", serviceUnitName)
	got := systemdUnit(packagedUnitSpec)
	if *rewriteService {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the generated unit (go test -run TestPackagedUnit -service.rewrite updates it):\n%s", path, got)
	}
	if !bytes.Contains(got, []byte("ExecStart=/usr/bin/branchnfs serve\n")) {
		t.Fatalf("the packaged unit does not run /usr/bin/branchnfs serve:\n%s", got)
	}
}

func TestServiceUsage(t *testing.T) {
	if code, _, stderr := runCLI(t, "service", "bogus"); code != exitUsage || !strings.Contains(stderr, "install, uninstall, status or logs") {
		t.Fatalf("service bogus: %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "service", "install", "--listen", "0.0.0.0:12049", "--no-start"); code != exitUsage || !strings.Contains(stderr, "--allow-remote") {
		t.Fatalf("service install with a remote address: %d %q", code, stderr)
	}
	if code, out, _ := runCLI(t, "service"); code != 0 || !strings.Contains(out, "install") {
		t.Fatalf("service: %d %q", code, out)
	}
}

func TestSystemdCommandQuoting(t *testing.T) {
	for _, words := range [][]string{
		{"/bin/branchnfs", "serve"},
		{"/a b/branchnfs", "--store", `/x "quoted" \ back`},
		{"/bin/b", "100%", "$HOME", "semi;colon", "tab\there", ""},
	} {
		line := systemdCommand(words)
		back, err := splitSystemdCommand(line)
		if err != nil || !reflect.DeepEqual(back, words) {
			t.Errorf("%q -> %s -> %q, %v", words, line, back, err)
		}
	}
	if _, err := splitSystemdCommand(`/bin/b "open`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

// TestPlistKeys: the agent is a valid property list with the keys launchd
// needs: started at load, restarted only after a failure, interactive,
// logging in ~/Library/Logs/branchnfs.
func TestPlistKeys(t *testing.T) {
	if _, err := exec.LookPath("plutil"); err == nil {
		path := filepath.Join(t.TempDir(), "agent.plist")
		os.WriteFile(path, launchdPlist(goldenSpec), 0o644)
		if out, err := exec.Command("plutil", "-lint", path).CombinedOutput(); err != nil {
			t.Fatalf("plutil -lint: %v\n%s", err, out)
		}
	}
	v, err := parsePlist(launchdPlist(goldenSpec))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("top level is %T, want a dict", v)
	}
	log := filepath.Join(goldenSpec.LogDir, serviceLogName)
	want := map[string]any{
		"Label":             serviceLabel,
		"RunAtLoad":         true,
		"KeepAlive":         map[string]any{"SuccessfulExit": false},
		"ProcessType":       "Interactive",
		"StandardOutPath":   log,
		"StandardErrorPath": log,
		"ExitTimeOut":       int64(serviceStopTimeoutSec),
	}
	for k, w := range want {
		if !reflect.DeepEqual(m[k], w) {
			t.Errorf("%s = %#v, want %#v", k, m[k], w)
		}
	}
	args, _ := m["ProgramArguments"].([]any)
	if len(args) < 2 || args[0] != goldenSpec.Binary || args[1] != "serve" {
		t.Errorf("ProgramArguments = %#v", m["ProgramArguments"])
	}
	for _, bad := range []string{
		`<plist><dict><key>a</key></dict></plist>`,
		`<plist><dict><string>x</string><true/></dict></plist>`,
		`<plist><dict><key>a</key><integer>x</integer></dict></plist>`,
		`<plist><dict><key>a</key><true/><key>a</key><false/></dict></plist>`,
		`<notplist/>`,
		`<plist><dict><key>a</key><string>unclosed</dict></plist>`,
	} {
		if _, err := parsePlist([]byte(bad)); err == nil {
			t.Errorf("parsePlist accepted %s", bad)
		}
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// branchnfsBinary builds this command once, into a directory every user
// may read.
func branchnfsBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bnfs-svc-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath, binErr = testbin.Build(dir, "branchnfs", testbin.Branchnfs)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// asUser returns the user the service tests run as: uid 1000 when the
// tests run as root, else the current user.
func asUser() testbin.User {
	if os.Geteuid() == 0 {
		return testbin.User{UID: 1000, GID: 1000}
	}
	return testbin.Current()
}

// userDir makes a directory the test user owns.
func userDir(t *testing.T, prefix string) string {
	t.Helper()
	d := testbin.SharedTempDir(t, prefix)
	u := asUser()
	if err := os.Chown(d, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSystemdAnalyzeVerify: systemd's own checker accepts the unit as a
// user's systemd would load it, with no warning, and flags a broken one.
func TestSystemdAnalyzeVerify(t *testing.T) {
	_, err := exec.LookPath("systemd-analyze")
	testbin.Prerequisite(t, err == nil, "no systemd-analyze", "apt-get install systemd")
	bin := branchnfsBinary(t) // ExecStart must name an executable
	dir := userDir(t, "bnfs-verify-")
	rt := userDir(t, "bnfs-rt-")
	os.Chmod(rt, 0o700)
	spec := goldenSpec
	spec.Binary = bin
	verify := func(unit []byte) string {
		t.Helper()
		path := filepath.Join(dir, serviceUnitName)
		if err := os.WriteFile(path, unit, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("systemd-analyze", "--user", "verify", path)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt, "HOME="+dir)
		asUser().Apply(cmd)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "exit: " + err.Error() + "\n" + string(out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := verify(systemdUnit(spec)); out != "" {
		t.Fatalf("systemd-analyze --user verify:\n%s\n%s", out, systemdUnit(spec))
	}
	broken := bytes.Replace(systemdUnit(spec), []byte("Type=notify"), []byte("Type=notified"), 1)
	if out := verify(broken); !strings.Contains(out, "service type") {
		t.Fatalf("systemd-analyze did not flag a bad Type: %q", out)
	}
}

// runAs runs bin with args as the test user with env added, and returns
// its exit code and output.
func runAs(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	asUser().Apply(cmd)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	t.Logf("branchnfs %s -> %d\n%s%s", strings.Join(args, " "), code, o.String(), e.String())
	return code, o.String(), e.String()
}

package kernel

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// These tests check the harness itself; they need neither qemu nor apt.

func TestVerdict(t *testing.T) {
	pass := &stepResult{pass: true}
	fail := &stepResult{pass: false, detail: "boom"}
	tests := []struct {
		name   string
		r      *stepResult
		known  bool
		wantOK bool
	}{
		{"pass unlisted", pass, false, true},
		{"fail unlisted", fail, false, false},
		{"fail listed", fail, true, true},
		{"pass listed", pass, true, false},
		{"missing unlisted", nil, false, false},
		{"missing listed", nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, ok := verdict(tt.r, tt.known, "reason")
			if ok != tt.wantOK {
				t.Errorf("verdict = %v (%s), want %v", ok, msg, tt.wantOK)
			}
		})
	}
}

var stepFuncRE = regexp.MustCompile(`(?m)^\s*step\s+(\S+)\s+(\S+)`)

func TestScenarioSteps(t *testing.T) {
	for _, name := range []string{"posix", "branch", "user", "git"} {
		script, err := os.ReadFile("testdata/" + name + ".sh")
		if err != nil {
			t.Fatal(err)
		}
		steps := scenarioSteps(string(script))
		seen := map[string]bool{}
		for _, s := range steps {
			if seen[s] {
				t.Errorf("%s.sh: step %q declared twice", name, s)
			}
			seen[s] = true
		}
		for _, m := range stepFuncRE.FindAllStringSubmatch(string(script), -1) {
			if !strings.Contains(string(script), "\n"+m[2]+"() {") {
				t.Errorf("%s.sh: step %s runs %s, which the script does not define", name, m[1], m[2])
			}
		}
		if len(steps) < 5 {
			t.Errorf("%s.sh: only %d steps: %v", name, len(steps), steps)
		}
	}
	script := "posix_steps() {\n\tstep a t_a\n\tstep b t_b\n}\nstep mount do_mount\nposix_steps\n"
	if got, want := scenarioSteps(script), []string{"a", "b", "mount"}; !reflect.DeepEqual(got, want) {
		t.Errorf("scenarioSteps = %v, want %v", got, want)
	}
	if got, want := oracleSteps(script), []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("oracleSteps = %v, want %v", got, want)
	}
	for key := range knownFailures {
		if !strings.HasPrefix(key, "TestKernelPOSIX/") && !strings.HasPrefix(key, "TestKernelBranches/") && !strings.HasPrefix(key, "TestKernelRegularUser/") && !strings.HasPrefix(key, "TestKernelGit/") {
			t.Errorf("knownFailures key %q names no kernel test", key)
		}
	}
}

// TestCpioWriter reads back the newc archive the initramfs is made of.
func TestCpioWriter(t *testing.T) {
	var c cpioWriter
	c.dir("bin", 0o755)
	c.file("bin/x", 0o700, []byte("hello"))
	c.file("empty", 0o644, nil)
	data := c.finish()
	if len(data)%4 != 0 {
		t.Errorf("archive length %d not a multiple of 4", len(data))
	}
	type entry struct {
		name string
		mode uint64
		body string
	}
	var got []entry
	r := bytes.NewReader(data)
	for {
		hdr := make([]byte, 110)
		if _, err := r.Read(hdr); err != nil {
			t.Fatalf("read header: %v", err)
		}
		if string(hdr[:6]) != "070701" {
			t.Fatalf("bad magic %q", hdr[:6])
		}
		field := func(i int) uint64 {
			var v uint64
			for _, ch := range hdr[6+8*i : 6+8*i+8] {
				v = v<<4 | uint64(strings.IndexByte("0123456789ABCDEF", ch))
			}
			return v
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := make([]byte, namesize)
		r.Read(name)
		skip(r, 110+int(namesize))
		body := make([]byte, size)
		r.Read(body)
		skip(r, int(size))
		n := string(name[:namesize-1])
		if n == "TRAILER!!!" {
			break
		}
		got = append(got, entry{n, mode, string(body)})
	}
	want := []entry{{"bin", 0o040755, ""}, {"bin/x", 0o100700, "hello"}, {"empty", 0o100644, ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("archive holds %+v, want %+v", got, want)
	}
}

// skip consumes the padding after n bytes so the next record is 4-aligned.
func skip(r *bytes.Reader, n int) {
	for ; n%4 != 0; n++ {
		r.ReadByte()
	}
}

// TestSharedClosure resolves the host's git's libraries, as gitLayer does
// for the guest's, and names a library a tree lacks.
func TestSharedClosure(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		prerequisite(t, "git not found on the host (Debian: apt-get install -y git)")
	}
	git, err = filepath.EvalSymlinks(git)
	if err != nil {
		t.Fatal(err)
	}
	libs, interp, err := sharedClosure("/", strings.TrimPrefix(git, "/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := libs["libc.so.6"]; !ok {
		t.Errorf("closure of %s lacks libc.so.6: %v", git, libs)
	}
	if _, ok := libs[path.Base(interp)]; !ok {
		t.Errorf("closure of %s lacks its loader %s: %v", git, interp, libs)
	}
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(git, filepath.Join(tree, "usr/bin/git")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sharedClosure(tree, "usr/bin/git"); err == nil || !strings.Contains(err.Error(), "add the package that ships it to gitPackages") {
		t.Errorf("closure in a tree without libraries: %v, want an error naming the missing library", err)
	}
}

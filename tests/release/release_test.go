package release

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

const module = "github.com/branchnfs/branchnfs"

// repoRoot is the repository's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// releaseConfig is what the test takes from .goreleaser.yaml: the targets
// and the ldflags line.
type releaseConfig struct {
	goos, goarch []string
	ldflags      string
}

var (
	listRE    = regexp.MustCompile(`(?m)^\s+(goos|goarch): \[([^\]]*)\]`)
	ldflagsRE = regexp.MustCompile(`(?m)^\s+ldflags:\n\s+- (.+)$`)
)

func readReleaseConfig(t *testing.T) releaseConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c releaseConfig
	for _, m := range listRE.FindAllStringSubmatch(string(b), -1) {
		var vals []string
		for _, v := range strings.Split(m[2], ",") {
			vals = append(vals, strings.TrimSpace(v))
		}
		if m[1] == "goos" {
			c.goos = vals
		} else {
			c.goarch = vals
		}
	}
	if m := ldflagsRE.FindStringSubmatch(string(b)); m != nil {
		c.ldflags = m[1]
	}
	if len(c.goos) == 0 || len(c.goarch) == 0 || c.ldflags == "" {
		t.Fatalf(".goreleaser.yaml: no goos, goarch or ldflags found: %+v", c)
	}
	return c
}

// TestReleaseMatrix builds every release target with the release's
// ldflags (templates filled in as goreleaser would) and checks that the
// host's binary reports the version, commit and date they set.
func TestReleaseMatrix(t *testing.T) {
	c := readReleaseConfig(t)
	want := map[string]string{"version": "9.8.7", "commit": "0123456789abcdef0123456789abcdef01234567", "date": "2026-12-01T10:00:00Z"}
	ldflags := strings.NewReplacer("{{.Version}}", want["version"], "{{.FullCommit}}", want["commit"], "{{.CommitDate}}", want["date"]).Replace(c.ldflags)
	if strings.Contains(ldflags, "{{") {
		t.Fatalf("ldflags %q use a template this test does not fill", c.ldflags)
	}
	out := t.TempDir()
	host := ""
	for _, goos := range c.goos {
		for _, goarch := range c.goarch {
			bin := filepath.Join(out, "branchnfs-"+goos+"-"+goarch)
			// Without -trimpath: the same compiled packages as the CI's
			// own darwin build, so only linking differs.
			cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/branchnfs")
			cmd.Dir = repoRoot(t)
			cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
			start := time.Now()
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("build %s/%s: %v\n%s", goos, goarch, err, b)
			}
			t.Logf("built %s/%s in %s", goos, goarch, time.Since(start).Round(time.Second))
			if goos == hostOS() && goarch == hostArch() {
				host = bin
			}
		}
	}
	if host == "" {
		testbin.Prerequisite(t, false, "the host is not a release target", "run on linux or darwin, amd64 or arm64")
		return
	}
	b, err := exec.Command(host, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("version --json: %v: %s", err, b)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("version --json: %s = %v, want %q (the release's -X flag does not reach it)", k, got[k], v)
		}
	}
}

func hostOS() string   { return goEnv("GOHOSTOS") }
func hostArch() string { return goEnv("GOHOSTARCH") }

func goEnv(k string) string {
	b, _ := exec.Command("go", "env", k).Output()
	return strings.TrimSpace(string(b))
}

// moduleZip writes the module zip of the repository's committed files
// at version, as a module proxy serves it: nested modules (tools/) are
// left out, as the go command leaves them out.
func moduleZip(t *testing.T, root, version, dst string) {
	t.Helper()
	b, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		testbin.Prerequisite(t, false, "not a git work tree: "+err.Error(), "run the tests in a clone of the repository")
	}
	files := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	var nested []string
	for _, f := range files {
		if path.Base(f) == "go.mod" && f != "go.mod" {
			nested = append(nested, path.Dir(f)+"/")
		}
	}
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(out)
files:
	for _, f := range files {
		for _, n := range nested {
			if strings.HasPrefix(f, n) {
				continue files
			}
		}
		fi, err := os.Lstat(filepath.Join(root, f))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink: not in a module zip
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(module + "@" + version + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()
}

// TestGoInstall installs the command with
// `go install github.com/branchnfs/branchnfs/cmd/branchnfs@latest` from a
// clean GOPATH, the module served by a proxy made of the committed files
// (so a replace directive, or a file a build step would generate, fails
// it as it would fail users). The other modules come from this machine's
// module cache, through a proxy too, so nothing is written to it.
func TestGoInstall(t *testing.T) {
	root := repoRoot(t)
	const version = "v0.99.0"
	proxy := t.TempDir()
	dir := filepath.Join(proxy, module, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339))
	for name, data := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": []byte(info), version + ".mod": gomod} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	moduleZip(t, root, version, filepath.Join(dir, version+".zip"))

	gopath := t.TempDir()
	cache := goEnv("GOMODCACHE")
	cmd := exec.Command("go", "install", module+"/cmd/branchnfs@latest")
	cmd.Dir = t.TempDir() // outside any module
	cmd.Env = append(os.Environ(),
		"GOPATH="+gopath, "GOMODCACHE="+filepath.Join(gopath, "pkg", "mod"), "GOBIN=",
		"GOFLAGS=-mod=mod", "GO111MODULE=on",
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(cache, "cache", "download")+","+goEnv("GOPROXY"),
		"GONOSUMDB="+module, "GOWORK=off")
	start := time.Now()
	b, err := cmd.CombinedOutput()
	t.Logf("go install took %s", time.Since(start).Round(time.Second))
	// The module cache is read-only: let TempDir remove it.
	defer exec.Command("chmod", "-R", "u+w", gopath).Run()
	if err != nil {
		t.Fatalf("go install %s/cmd/branchnfs@latest: %v\n%s", module, err, b)
	}
	bin := filepath.Join(gopath, "bin", "branchnfs")
	vb, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	var v map[string]any
	if err := json.Unmarshal(vb, &v); err != nil || v["version"] != version {
		t.Fatalf("the installed binary says %s, want version %s (from the module's build information)", vb, version)
	}
	if bytes.Contains(gomod, []byte("\nreplace")) {
		t.Fatal("go.mod has a replace directive: go install module@version refuses it")
	}
}

package e2e

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
	nfs "github.com/willscott/go-nfs-client/nfs"
)

func needGit(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("git")
	testbin.Prerequisite(t, err == nil, "git is not installed", "apt-get install git")
}

// gitAs runs git in dir as u, with stdin, and returns its output.
func gitAs(t *testing.T, u osUser, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=u",
		"GIT_AUTHOR_EMAIL=u@example.com", "GIT_COMMITTER_NAME=u", "GIT_COMMITTER_EMAIL=u@example.com"}
	runAs(cmd, u)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// digest describes every path under root but those under skip: type,
// mode, content hash or symlink target, and a file's mtime.
func digest(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, s := range skip {
			if rel == s || strings.HasPrefix(rel, s+"/") {
				if fi.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		switch {
		case rel == ".":
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[rel] = "symlink " + target
		case fi.IsDir():
			m[rel] = fmt.Sprintf("dir %v", fi.Mode())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = fmt.Sprintf("file %v %x %s", fi.Mode(), sha256.Sum256(b), fi.ModTime().UTC().Format(time.RFC3339Nano))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func digestDiff(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if got[k] != v {
			out = append(out, fmt.Sprintf("%s: want %q, got %q", k, v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: unexpected %q", k, v))
		}
	}
	return strings.Join(out, "\n")
}

// copyAs copies folder src to a new folder owned by u.
func copyAs(t *testing.T, u osUser, src string) string {
	t.Helper()
	dst := filepath.Join(userDir(t, u), "copy")
	if b, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, b)
	}
	chownTree(t, dst, u)
	return dst
}

// TestApplyRoundTrip runs the results commands as a regular user
// against a running server: the patch passes git apply --check against
// the imported repository and git apply gives the branch; export --tar -
// streams the branch; apply writes the branch into a copy of the folder
// byte for byte; a conflict leaves the folder unchanged; an apply killed
// with SIGKILL part-way leaves every path old or new, and the next apply
// completes it.
func TestApplyRoundTrip(t *testing.T) {
	needGit(t)
	owner := regularUser
	src := filepath.Join(userDir(t, owner), "src")
	os.MkdirAll(filepath.Join(src, "old", "sub"), 0o755)
	for i := range 40 {
		os.WriteFile(filepath.Join(src, fmt.Sprintf("f%02d", i)), []byte(fmt.Sprintf("content %02d\n", i)), 0o644)
	}
	os.WriteFile(filepath.Join(src, "bin.dat"), []byte("\x00\x01binary"), 0o644)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(src, "old", "sub", "x"), []byte("x\n"), 0o644)
	os.Symlink("f00", filepath.Join(src, "link"))
	chownTree(t, src, owner)
	gitAs(t, owner, src, "", "init", "-q", "-b", "main")
	gitAs(t, owner, src, "", "config", "user.name", "A User")
	gitAs(t, owner, src, "", "config", "user.email", "user@example.com")
	gitAs(t, owner, src, "", "add", "-A")
	gitAs(t, owner, src, "", "commit", "-q", "-m", "base")

	store := newStore(t)
	mustCLI(t, store, "init", "--from", src)
	srv := startServer(t, store, 0)
	mustCLI(t, store, "fork", "main", "b")
	tg, _ := dial(t, srv.port).mount(t, "/b")
	for i := range 20 {
		writeFile(t, tg, fmt.Sprintf("f%02d", i), []byte(fmt.Sprintf("changed %02d in the branch\n", i)))
	}
	writeFile(t, tg, "bin.dat", []byte("\x00\x02BINARY and longer"))
	if err := tg.Remove("f39"); err != nil {
		t.Fatal(err)
	}
	if err := tg.RemoveAll("old"); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Mkdir("newdir", 0o750); err != nil {
		t.Fatal(err)
	}
	writeFile(t, tg, "newdir/n1", []byte("new\n"))
	if err := tg.Remove("link"); err != nil {
		t.Fatal(err)
	}
	if err := tg.Symlink("f01", "link"); err != nil {
		t.Fatal(err)
	}
	if err := tg.Setattr("run.sh", nfs.Sattr3{Mode: nfs.SetMode{SetIt: true, Mode: 0o755}}); err != nil {
		t.Fatal(err)
	}

	exported := filepath.Join(userDir(t, owner), "exported")
	mustCLI(t, store, "export", "b", exported)
	want := digest(t, exported, ".git")

	t.Run("patch", func(t *testing.T) {
		patch := mustCLI(t, store, "diff", "b", "--patch")
		if strings.Contains(patch, ".git/") || !strings.Contains(patch, "GIT binary patch") {
			t.Fatalf("patch:\n%s", patch)
		}
		dir := copyAs(t, owner, src)
		gitAs(t, owner, dir, patch, "apply", "--check", "-")
		gitAs(t, owner, dir, patch, "apply", "-")
		// A patch carries neither mtimes nor modes but a file's
		// executable bit.
		strip := func(m map[string]string) map[string]string {
			out := map[string]string{}
			for k, v := range m {
				switch f := strings.Fields(v); f[0] {
				case "file":
					v = fmt.Sprintf("file %v %s", strings.Contains(f[1], "x"), f[2])
				case "dir":
					v = "dir"
				}
				out[k] = v
			}
			return out
		}
		if d := digestDiff(strip(want), strip(digest(t, dir, ".git"))); d != "" {
			t.Fatalf("git apply of the patch differs from the branch:\n%s", d)
		}
	})

	t.Run("tar", func(t *testing.T) {
		_, out, _ := cli(t, store, "export", "b", "--tar", "-")
		tr := tar.NewReader(strings.NewReader(out))
		names := map[string]bool{}
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names[h.Name] = true
		}
		if !names["newdir/"] || !names["newdir/n1"] || names["f39"] || !names[".git/HEAD"] {
			t.Fatalf("export --tar - through the server: %v", names)
		}
		// tar itself, as the same user, gives the folder export wrote.
		_, err := exec.LookPath("tar")
		testbin.Prerequisite(t, err == nil, "tar is not installed", "apt-get install tar")
		dir := userDir(t, owner)
		tarFile := filepath.Join(dir, "b.tar")
		mustCLI(t, store, "export", "b", "--tar", tarFile)
		untarred := filepath.Join(dir, "untarred")
		os.Mkdir(untarred, 0o755)
		chownTree(t, untarred, owner)
		cmd := exec.Command("tar", "-xpf", tarFile, "-C", untarred)
		runAs(cmd, owner)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar -x: %v %s", err, b)
		}
		if d := digestDiff(digest(t, exported), digest(t, untarred)); d != "" {
			t.Fatalf("tar -x of export --tar differs from export:\n%s", d)
		}
	})

	t.Run("git-branch", func(t *testing.T) {
		dir := copyAs(t, owner, src)
		before := digest(t, dir)
		out := mustCLI(t, store, "apply", "b", "--to", dir, "--git-branch", "agent")
		if !strings.Contains(out, "refs/heads/agent") {
			t.Fatalf("apply --git-branch: %q", out)
		}
		stat := gitAs(t, owner, dir, "", "show", "--stat=200", "--format=", "agent")
		var files []string
		for _, l := range strings.Split(stat, "\n") {
			if f, _, ok := strings.Cut(l, "|"); ok {
				files = append(files, strings.TrimSpace(f))
			}
		}
		var want []string
		for i := range 20 {
			want = append(want, fmt.Sprintf("f%02d", i))
		}
		want = append(want, "f39", "link", "newdir/n1", "old/sub/x", "run.sh")
		want = append([]string{"bin.dat"}, want...)
		if strings.Join(files, ",") != strings.Join(want, ",") {
			t.Fatalf("git show --stat agent lists %v, want %v", files, want)
		}
		// The working tree is untouched (.git gained the ref and objects).
		if d := digestDiff(before, digest(t, dir)); d != "" {
			for _, l := range strings.Split(d, "\n") {
				if !strings.HasPrefix(l, ".git/") {
					t.Fatalf("apply --git-branch changed the working tree:\n%s", d)
				}
			}
		}
	})

	t.Run("conflict", func(t *testing.T) {
		dir := copyAs(t, owner, src)
		os.WriteFile(filepath.Join(dir, "f05"), []byte("mine\n"), 0o644)
		before := digest(t, dir)
		code, out, _ := cli(t, store, "apply", "b", "--to", dir)
		if code != 16 || !strings.Contains(out, "C  f05: changed in the folder since the fork") {
			t.Fatalf("apply with a conflict: %d %q", code, out)
		}
		if d := digestDiff(before, digest(t, dir)); d != "" {
			t.Fatalf("a refused apply changed the folder:\n%s", d)
		}
	})

	t.Run("kill", func(t *testing.T) {
		dir := copyAs(t, owner, src)
		old := digest(t, dir, ".git")
		cmd := exec.Command(binPath, "apply", "b", "--to", dir, "--store", store)
		cmd.Env = append(os.Environ(), "BRANCHNFS_TEST_APPLY_PAUSE=12")
		runAs(cmd, owner)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(stderr).ReadString('\n')
		if !strings.Contains(line, "apply paused after 12 steps") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("apply did not pause: %q", line)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		// Every path is old or new.
		mid := digest(t, dir, ".git", ".branchnfs-apply")
		moved := 0
		for k, v := range mid {
			if v != old[k] && v != want[k] {
				t.Errorf("%s after kill -9 is neither old nor new: %q (old %q, new %q)", k, v, old[k], want[k])
			}
			if v == want[k] && v != old[k] {
				moved++
			}
		}
		for k := range old {
			if _, ok := mid[k]; !ok && want[k] != "" {
				t.Errorf("%s missing after kill -9", k)
			}
		}
		if moved == 0 || digestDiff(want, mid) == "" {
			t.Fatalf("the killed apply had moved %d paths: not part-way", moved)
		}
		code, out, _ := cli(t, store, "apply", "b", "--to", dir)
		if code != 0 || !strings.Contains(out, "was cut short: completed it") {
			t.Fatalf("apply after kill -9: %d %q", code, out)
		}
		if d := digestDiff(want, digest(t, dir, ".git")); d != "" {
			t.Fatalf("the folder differs from the branch after the completed apply:\n%s", d)
		}
	})
}

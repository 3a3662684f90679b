package kernel

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestKernelGit runs testdata/git.sh: Debian's git, as uid 1000 in the
// guest, in a kernel mount of a fork of main: a repository of 1,000 files,
// commits, a local clone, branches, gc and fsck. The fork is committed,
// and the host checks main's repository with its own git on an export.
func TestKernelGit(t *testing.T) {
	img, helper, srv := regularUserSetup(t)
	if _, err := exec.LookPath("git"); err != nil {
		prerequisite(t, "git not found on the host (Debian: apt-get install -y git)")
	}
	layer, err := gitLayer(t)
	if err != nil {
		prerequisite(t, "cannot build the guest's git from Debian packages: %v", err)
	}
	cli := func(args ...string) hostAction {
		return func(extra []string) error {
			_, err := srv.cli(append(args, extra...)...)
			return err
		}
	}
	actions := map[string]hostAction{
		"fork":      cli("fork"),
		"commit":    cli("commit"),
		"checkrepo": func(args []string) error { return checkExportedRepo(t, srv, args) },
	}
	opts, err := srv.linuxMountOptions("main")
	if err != nil {
		t.Fatal(err)
	}
	runScenario(t, "git", srv, img.withLayers(layer), helper, map[string]string{"MOUNT_OPTS": opts}, actions, 12*time.Minute)
}

// checkExportedRepo is the host action "checkrepo BRANCH REPO HEAD FILES":
// it exports BRANCH and checks, with the host's git run as the server's
// user, that the repository REPO in it has HEAD at commit HEAD, FILES
// tracked files, a clean status, all its objects packed, and passes fsck.
func checkExportedRepo(t *testing.T, srv *nfsServer, args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: checkrepo BRANCH REPO HEAD FILES, got %q", args)
	}
	branch, repo, head := args[0], args[1], args[2]
	files, err := strconv.Atoi(args[3])
	if err != nil {
		return fmt.Errorf("checkrepo: FILES %q: %w", args[3], err)
	}
	dir := testbin.SharedTempDir(t, "bnfs-git-")
	if srv.cred != nil {
		if err := os.Chown(dir, int(srv.cred.Uid), int(srv.cred.Gid)); err != nil {
			return err
		}
	}
	export := filepath.Join(dir, "export")
	if _, err := srv.cli("export", branch, export); err != nil {
		return err
	}
	work := filepath.Join(export, repo)
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", work}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: srv.cred}
		cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("host git %s in the export of %s: %v: %s", strings.Join(args, " "), branch, err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	if got, err := git("rev-parse", "HEAD"); err != nil {
		return err
	} else if got != head {
		return fmt.Errorf("HEAD of %s in the export of %s is %s, want %s", repo, branch, got, head)
	}
	ls, err := git("ls-files")
	if err != nil {
		return err
	}
	if got := len(strings.Split(ls, "\n")); got != files {
		return fmt.Errorf("%s in the export of %s tracks %d files, want %d", repo, branch, got, files)
	}
	if st, err := git("status", "--porcelain"); err != nil {
		return err
	} else if st != "" {
		return fmt.Errorf("git status of %s in the export of %s is not clean: %s", repo, branch, tail(st, 10))
	}
	if counts, err := git("count-objects", "-v"); err != nil {
		return err
	} else if !strings.Contains(counts, "\ncount: 0\n") && !strings.HasPrefix(counts, "count: 0\n") {
		return fmt.Errorf("loose objects in %s after git gc: %s", repo, counts)
	}
	if _, err := git("fsck", "--full", "--strict", "--no-dangling"); err != nil {
		return err
	}
	return nil
}

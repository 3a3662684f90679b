package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bannerLine waits for the line of the server's banner that starts with
// prefix.
func bannerLine(t *testing.T, s *server, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range strings.Split(s.out.String(), "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no banner line %q in:\n%s", prefix, s.out.String())
	return ""
}

// The curl line of the banner works as printed: it sends the token.
func TestBannerCurlWorks(t *testing.T) {
	store := newStore(t)
	s := startServer(t, store, 0)
	line := bannerLine(t, s, "control API: ")
	cmdline := strings.TrimPrefix(line, "control API: ")
	cmd := exec.Command("/bin/sh", "-c", cmdline)
	runAs(cmd, storeOwner(store))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"version"`) {
		t.Fatalf("the banner's %q: %v: %s", cmdline, err, out)
	}
	// It says how to mount, as no --mount was given.
	bannerLine(t, s, "mount every branch (export /):")
}

// With --mount the server mounts / itself: the banner does not tell the
// user to mount it by hand (even when the mount then fails, as here
// without an NFS client or privileges, which the server reports apart).
func TestBannerWithMount(t *testing.T) {
	store := newStore(t)
	mnt := filepath.Join(filepath.Dir(store), "mnt")
	s := startServer(t, store, 0, "--mount", mnt)
	bannerLine(t, s, "mounting every branch (export /) at "+mnt)
	if strings.Contains(s.out.String(), "mount every branch") {
		t.Fatalf("the banner suggests a manual mount with --mount:\n%s", s.out.String())
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// foreignDirEnv names a directory that another user owns (made by the
// test when it runs as root), for TestStoreDirOwnerAndMode.
const foreignDirEnv = "BNFS_TEST_FOREIGN_DIR"

// A store that another user could change (its directory, or one above
// it, writable by others or owned by someone else) is refused with what
// to do; a store under a sticky world-writable directory such as /tmp is
// fine. Run as a user who is not root.
func TestStoreDirOwnerAndMode(t *testing.T) {
	if os.Geteuid() == 0 {
		// A directory of another user, with one of the test's user inside.
		alien := filepath.Join(testbin.SharedTempDir(t, "bnfs-alien"), "alien")
		mine := filepath.Join(alien, "mine")
		for _, d := range []string{alien, mine} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(alien, testbin.UnprivilegedUID+1, testbin.UnprivilegedUID+1); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(mine, testbin.UnprivilegedUID, testbin.UnprivilegedUID); err != nil {
			t.Fatal(err)
		}
		t.Setenv(foreignDirEnv, mine)
	}
	testbin.PassesUnprivileged(t, "TestStoreDirOwnerAndMode", "TestStoreDirOwnerAndMode", func(t *testing.T) {
		base := t.TempDir()
		mkdir := func(name string, mode os.FileMode) string {
			d := filepath.Join(base, name)
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, mode); err != nil {
				t.Fatal(err)
			}
			return d
		}
		for _, tc := range []struct {
			name, store string
			want        string // in the error; "" for success
		}{
			{"world-writable-store", mkdir("ws", 0o777), "chmod go-w"},
			{"group-writable-store", mkdir("gs", 0o770), "writable by other users (mode 0770)"},
			{"world-writable-parent", filepath.Join(mkdir("wp", 0o777), "s"), "above the store, is writable by other users"},
			{"sticky-store", mkdir("ss", os.ModeSticky|0o777), "chmod go-w"},
			{"sticky-parent", filepath.Join(mkdir("sp", os.ModeSticky|0o777), "s"), ""},
			{"private", filepath.Join(mkdir("ok", 0o755), "s"), ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, _, stderr := runCLI(t, "init", "--store", tc.store)
				if tc.want == "" {
					if code != 0 {
						t.Fatalf("init in %s: exit %d: %s", tc.store, code, stderr)
					}
					return
				}
				if code == 0 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "control.sock") {
					t.Fatalf("init in %s: exit %d: %q; want a refusal saying %q", tc.store, code, stderr, tc.want)
				}
			})
		}
		// Once fixed as the error says, the store is accepted.
		fixed := filepath.Join(base, "ws")
		if err := os.Chmod(fixed, 0o755); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCLI(t, "init", "--store", fixed); code != 0 {
			t.Fatalf("init after chmod go-w: exit %d: %s", code, stderr)
		}
		// A symbolic link to a store, made by the user, is fine.
		link := filepath.Join(base, "link")
		if err := os.Symlink(fixed, link); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCLI(t, "status", "--store", link); code != 0 {
			t.Fatalf("status through a link: exit %d: %s", code, stderr)
		}
		foreign := os.Getenv(foreignDirEnv)
		testbin.Prerequisite(t, foreign != "", "no directory of another user", "run the tests as root, which makes one")
		code, _, stderr := runCLI(t, "init", "--store", filepath.Join(foreign, "s"))
		if code == 0 || !strings.Contains(stderr, "is owned by uid") || !strings.Contains(stderr, "move the store") {
			t.Fatalf("init under a directory of uid %d: exit %d: %q; want a refusal", testbin.UnprivilegedUID+1, code, stderr)
		}
	})
}

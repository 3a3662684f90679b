package importdir

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestImportSwapRace swaps an entry of the source between the import's
// lstat of it and its open, as an attacker racing the import would: the
// import must read nothing outside the source, not hang, and fail with
// ErrChanged naming the entry. It runs as a user who is not root (as
// importers do).
func TestImportSwapRace(t *testing.T) {
	secret := []byte("-----BEGIN OPENSSH PRIVATE KEY----- not to be imported")
	type swap func(t *testing.T, src, outside string)
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		at   string // the entry swapped, relative to the source
		swap swap
		want string // in the error
	}{
		{"dir-to-symlink-outside", "ssh", func(t *testing.T, src, outside string) {
			must(t, os.Rename(filepath.Join(src, "ssh"), filepath.Join(src, "ssh.moved")))
			must(t, os.Symlink(outside, filepath.Join(src, "ssh")))
		}, "was a directory when listed, a symlink when read"},
		{"file-to-symlink-outside", "ssh/id_rsa", func(t *testing.T, src, outside string) {
			must(t, os.Remove(filepath.Join(src, "ssh", "id_rsa")))
			must(t, os.Symlink(filepath.Join(outside, "id_rsa"), filepath.Join(src, "ssh", "id_rsa")))
		}, "was a regular file when listed, a symlink when read"},
		{"file-to-fifo", "ssh/id_rsa", func(t *testing.T, src, outside string) {
			must(t, os.Remove(filepath.Join(src, "ssh", "id_rsa")))
			must(t, syscall.Mkfifo(filepath.Join(src, "ssh", "id_rsa"), 0o644))
		}, "was a regular file when listed, a FIFO when read"},
		{"file-to-dev-zero", "ssh/id_rsa", func(t *testing.T, src, outside string) {
			must(t, os.Remove(filepath.Join(src, "ssh", "id_rsa")))
			must(t, os.Symlink("/dev/zero", filepath.Join(src, "ssh", "id_rsa")))
		}, "a symlink when read"},
		{"file-to-other-file", "ssh/id_rsa", func(t *testing.T, src, outside string) {
			p := filepath.Join(src, "ssh", "id_rsa")
			must(t, os.WriteFile(p+".new", []byte("other"), 0o600))
			must(t, os.Rename(p+".new", p))
		}, "another file"},
		{"file-grows", "ssh/id_rsa", func(t *testing.T, src, outside string) {
			f, err := os.OpenFile(filepath.Join(src, "ssh", "id_rsa"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.Write(bytes.Repeat([]byte("x"), 1<<20))
			must(t, err)
			must(t, f.Close())
		}, "longer than its 5 bytes"},
		{"symlink-to-file", "link", func(t *testing.T, src, outside string) {
			must(t, os.Remove(filepath.Join(src, "link")))
			must(t, os.WriteFile(filepath.Join(src, "link"), []byte("x"), 0o600))
		}, "was a symlink when listed, a regular file when read"},
	}
	testbin.Unprivileged(t, "TestImportSwapRace", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				outside := t.TempDir()
				must(t, os.WriteFile(filepath.Join(outside, "id_rsa"), secret, 0o600))
				src := t.TempDir()
				must(t, os.Mkdir(filepath.Join(src, "ssh"), 0o700))
				must(t, os.WriteFile(filepath.Join(src, "ssh", "id_rsa"), []byte("inner"), 0o600))
				must(t, os.WriteFile(filepath.Join(src, "plain"), []byte("plain"), 0o644))
				must(t, os.Symlink("plain", filepath.Join(src, "link")))
				swapped := false
				SetBeforeOpen(t, func(rel string) {
					if rel == c.at && !swapped {
						swapped = true
						c.swap(t, src, outside)
					}
				})
				f := newFS(t)
				_, err := Import(context.Background(), f, cowfs.RootIno, src, Options{})
				if !swapped {
					t.Fatalf("%s was never opened", c.at)
				}
				if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), c.at+":") || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("import: %v, want ErrChanged for %s (%q)", err, c.at, c.want)
				}
				for p, e := range viewEntries(t, f) {
					if e.Type == "file" && e.Size >= int64(len(secret)) {
						t.Errorf("%s holds %d bytes: read from outside the source", p, e.Size)
					}
				}
			})
		}
	})
}

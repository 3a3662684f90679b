package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// untarStore unpacks a frozen store from testdata into a new directory and
// returns the store's path.
func untarStore(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("%s: %q leaves the directory", name, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, tr); err != nil {
				t.Fatal(err)
			}
			w.Close()
		}
	}
	return filepath.Join(dir, "store")
}

// frozenFiles is what the frozen store's main holds (testdata/README.md):
// SHA-256 of each file, "->target" for a symlink.
var frozenFiles = map[string]string{
	"hello.txt":      "c330e30ccba9cb4f18c7f2e579d6b7ca7ab15ce7ea05cd55d3f1f2a0e77c3ee7",
	"cafe\u0301.txt": "d2db2986f611bdc2ae4d62b91723ac7d5519fd39bcf525c484daf4c182259b6a",
	"large.bin":      "90edeab63254aa2a09127ae343a0431662d0d6ad23159330dd6461b6dbea286c",
	"repeat.txt":     "3f65b5323f6b2e56b661b7e98d7cde500e9e6bd6ba949b8a2aacceff6e34471d",
	"link":           "->hello.txt",
	"sub/empty":      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	"sub/run.sh":     "299001868fb8c02fd431c336c6d058f5558c5dff5b5af5e6fe04b870a6a9cbba",
	"sub/small.bin":  "f96e222bbc0d70176235005ab517557b80a84c296419cda221c8d3371f52f801",
}

// TestFrozenStore: a store written by an earlier release (format 3) opens
// in this build, every file of both branches reads back with its hash,
// the NFC spelling finds the NFD name, and the store takes new branches
// and writes.
func TestFrozenStore(t *testing.T) {
	ctx := context.Background()
	dir := untarStore(t, "store-format3.tar.gz")
	s, err := openStore(ctx, dir, openOptions{})
	if err != nil {
		t.Fatalf("open the frozen store: %v", err)
	}
	defer s.Close()
	for _, branch := range []string{"main", "feature"} {
		v, _, err := s.mgr.View(branch)
		if err != nil {
			t.Fatalf("%s: %v", branch, err)
		}
		fs := v.Billy()
		for name, want := range frozenFiles {
			if target, ok := strings.CutPrefix(want, "->"); ok {
				if got, err := fs.Readlink(name); err != nil || got != target {
					t.Errorf("%s: readlink %s = %q, %v; want %q", branch, name, got, err, target)
				}
				continue
			}
			f, err := fs.Open(name)
			if err != nil {
				t.Errorf("%s: open %s: %v", branch, name, err)
				continue
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if got := hex.EncodeToString(h.Sum(nil)); err != nil || got != want {
				t.Errorf("%s: %s has sha256 %s (%v), want %s", branch, name, got, err, want)
			}
		}
		if fi, err := fs.Stat("sub/run.sh"); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: sub/run.sh: %v %v, want mode 0755", branch, fi, err)
		}
		if _, err := fs.Stat("caf\u00e9.txt"); err != nil {
			t.Errorf("%s: the NFC spelling of the NFD name: %v", branch, err)
		}
	}
	if _, err := s.mgr.Fork(ctx, "feature", "next"); err != nil {
		t.Fatalf("fork in the frozen store: %v", err)
	}
	v, _, err := s.mgr.View("next")
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.Billy().Create("new.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("written by this build\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.mgr.Commit(ctx, "next"); err != nil {
		t.Fatalf("commit in the frozen store: %v", err)
	}
}

// TestNewerStoreRefused: a store of a format newer than this build's is
// refused, and the message names both formats and this binary's version.
func TestNewerStoreRefused(t *testing.T) {
	ctx := context.Background()
	dir := untarStore(t, "store-format3.tar.gz")
	st, err := kv.OpenBadger(filepath.Join(dir, dbDirName), kv.BadgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The format record (docs/design.md, "Store layout"): as a newer
	// release would stamp it.
	err = st.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("Mformat"), []byte{0, 0, 0, 0, 0, 0, 0, 99}) })
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = openStore(ctx, dir, openOptions{})
	if !errors.Is(err, cowfs.ErrFormat) {
		t.Fatalf("open a newer store: %v, want cowfs.ErrFormat", err)
	}
	msg := errorMessage(err)
	for _, want := range []string{"format 99", "formats up to 3", "branchnfs " + versionInfo().Version, "newer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if code, _, stderr := runCLI(t, "list", "--store", dir); code != exitError || !strings.Contains(stderr, "format 99") {
		t.Fatalf("list on a newer store: %d %q", code, stderr)
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/go-git/go-billy/v5"
)

// inBranch opens the store directly and runs fn on branch name's files.
func inBranch(t *testing.T, store, name string, fn func(fs billy.Filesystem)) {
	t.Helper()
	s, err := openStore(context.Background(), store, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	v, _, err := s.mgr.View(name)
	if err != nil {
		t.Fatal(err)
	}
	fn(v.Billy())
}

func writeFile(t *testing.T, fs billy.Filesystem, name, data string, mode os.FileMode) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDiffQuotesNames: a name with a newline cannot forge a line of the
// human diff, and an escape sequence does not reach the terminal; JSON
// keeps the names exact.
func TestDiffQuotesNames(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	s := []string{"--store", store}
	if code, _, _ := runCLI(t, append([]string{"init"}, s...)...); code != 0 {
		t.Fatal("init failed")
	}
	runCLI(t, append([]string{"fork", "main", "b"}, s...)...)
	forged := "x\nD  file  1 B  passwd"
	escape := "red\x1b[31mtext"
	inBranch(t, store, "b", func(fs billy.Filesystem) {
		writeFile(t, fs, forged, "a", 0o644)
		writeFile(t, fs, escape, "b", 0o644)
		writeFile(t, fs, "plain.txt", "c", 0o644)
	})
	code, out, _ := runCLI(t, append([]string{"diff", "b"}, s...)...)
	if code != 0 {
		t.Fatalf("diff: %d", code)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("diff printed %d lines, want 3 changes and a summary: %q", len(lines), out)
	}
	if strings.Contains(out, "\x1b") {
		t.Fatalf("an escape sequence reached the output: %q", out)
	}
	for _, want := range []string{`"x\nD  file  1 B  passwd"`, `"red\033[31mtext"`, " plain.txt"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff output lacks %s: %q", want, out)
		}
	}
	code, out, _ = runCLI(t, append([]string{"diff", "b", "--json"}, s...)...)
	var d branches.Diff
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("diff --json: %d %q", code, out)
	}
	got := map[string]bool{}
	for _, c := range d.Changes {
		got[c.Path] = true
	}
	if !got[forged] || !got[escape] || !got["plain.txt"] {
		t.Fatalf("JSON names not exact: %+v", d.Changes)
	}
}

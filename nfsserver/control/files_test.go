package control

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

func TestFilesThroughClient(t *testing.T) {
	ctx := context.Background()
	m, dir := diskManager(t, 10)
	c := serveBackend(t, m, dir)
	w, err := c.WriteFile(ctx, "b", FileWriteRequest{Path: "src/a.go", Content: "package a\n\nfunc A() int { return 1 }\n"})
	if err != nil || !w.Created || w.Path != "src/a.go" {
		t.Fatalf("write: %+v, %v", w, err)
	}
	r, err := c.ReadFile(ctx, "b", FileReadRequest{Path: "src/a.go", Offset: 11, Limit: 4})
	if err != nil || r.Content != "func" || r.EOF || r.Size != 37 {
		t.Fatalf("read: %+v, %v", r, err)
	}
	if _, err := c.EditFile(ctx, "b", FileEditRequest{Path: "src/a.go", OldString: "return 1", NewString: "return 2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EditFile(ctx, "b", FileEditRequest{Path: "src/a.go", OldString: "nothing", NewString: "x"}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("edit of an absent string: %v, want no_match", err)
	}
	if _, err := c.WriteFile(ctx, "b", FileWriteRequest{Path: "src/b.go", Content: "A A"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EditFile(ctx, "b", FileEditRequest{Path: "src/b.go", OldString: "A", NewString: "B"}); !errors.Is(err, ErrNotUnique) {
		t.Fatalf("edit of a repeated string: %v, want not_unique", err)
	}
	l, err := c.ListFiles(ctx, "b", FileListRequest{Glob: "**/*.go"})
	if err != nil || len(l.Entries) != 2 || l.Entries[0].Path != "src/a.go" {
		t.Fatalf("list: %+v, %v", l, err)
	}
	s, err := c.SearchFiles(ctx, "b", FileSearchRequest{Pattern: `return \d`})
	if err != nil || len(s.Matches) != 1 || s.Matches[0].Line != 3 || !strings.Contains(s.Matches[0].Text, "return 2") {
		t.Fatalf("search: %+v, %v", s, err)
	}
	// f holds random bytes: skipped as binary.
	if s.FilesSkipped != 1 {
		t.Fatalf("search skipped %d files, want the binary f", s.FilesSkipped)
	}
	if _, err := c.MoveFile(ctx, "b", FileMoveRequest{From: "src/b.go", To: "src/a.go"}); !errors.Is(err, branches.ErrExists) {
		t.Fatalf("move onto an existing file: %v, want exists", err)
	}
	if _, err := c.MoveFile(ctx, "b", FileMoveRequest{From: "src/b.go", To: "lib/b.go"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteFile(ctx, "b", FileDeleteRequest{Path: "src"}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("delete of a non-empty directory: %v", err)
	}
	if d, err := c.DeleteFile(ctx, "b", FileDeleteRequest{Path: "src", Recursive: true}); err != nil || d.Removed != 2 {
		t.Fatalf("recursive delete: %+v, %v", d, err)
	}
	diff, err := c.Diff(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, ch := range diff.Changes {
		paths = append(paths, ch.Path)
	}
	if got := strings.Join(paths, " "); !strings.Contains(got, "lib/b.go") || strings.Contains(got, "src") {
		t.Fatalf("diff after the file operations: %v", paths)
	}
}

// A write up to MaxWriteBytes goes through (the body is larger than other
// requests'), and a read whose limit cuts a character stops before it.
func TestFilesLargeWriteAndCutCharacter(t *testing.T) {
	ctx := context.Background()
	m, dir := diskManager(t, 10)
	c := serveBackend(t, m, dir)
	big := strings.Repeat("é", 3<<20) // 6 MiB of two-byte characters
	if w, err := c.WriteFile(ctx, "b", FileWriteRequest{Path: "big.txt", Content: big}); err != nil || w.Bytes != len(big) {
		t.Fatalf("write of %d bytes: %+v, %v", len(big), w, err)
	}
	r, err := c.ReadFile(ctx, "b", FileReadRequest{Path: "big.txt", Offset: 0, Limit: 5})
	if err != nil || r.Content != "éé" || r.Bytes != 4 || r.ContentBase64 != "" {
		t.Fatalf("read of 5 bytes of two-byte characters: %+v, %v", r, err)
	}
	if _, err := c.WriteFile(ctx, "b", FileWriteRequest{Path: "huge.txt", Content: strings.Repeat("x", MaxWriteBytes+1)}); err == nil {
		t.Fatal("a write above MaxWriteBytes succeeded")
	}
}

func TestFilesConfinedToBranch(t *testing.T) {
	ctx := context.Background()
	m, dir := diskManager(t, 10)
	v, _, err := m.View("b")
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"etc": "/etc", "up": "../..", "in": "f"} {
		if _, err := v.Symlink(cowfs.RootIno, name, target, cowfs.NewAttr{Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	c := serveBackend(t, m, dir)
	for _, p := range []string{"../x", "a/../../x", "/etc/passwd", "etc/passwd", "up/etc/passwd"} {
		if _, err := c.ReadFile(ctx, "b", FileReadRequest{Path: p}); !errors.Is(err, ErrOutsideBranch) {
			t.Errorf("read %q: %v, want outside_branch", p, err)
		}
		if _, err := c.WriteFile(ctx, "b", FileWriteRequest{Path: p, Content: "x"}); !errors.Is(err, ErrOutsideBranch) {
			t.Errorf("write %q: %v, want outside_branch", p, err)
		}
	}
	if r, err := c.ReadFile(ctx, "b", FileReadRequest{Path: "in"}); err != nil || r.Path != "f" {
		t.Errorf("read through a symlink inside the branch: %+v, %v", r, err)
	}
	// Deleting the symlink itself is fine: it is inside the branch.
	if _, err := c.DeleteFile(ctx, "b", FileDeleteRequest{Path: "etc"}); err != nil {
		t.Errorf("delete of the symlink: %v", err)
	}
	if _, err := c.ReadFile(ctx, "nope", FileReadRequest{Path: "f"}); !errors.Is(err, branches.ErrNotFound) {
		t.Errorf("read in a missing branch: %v", err)
	}
}

func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"*.go", "a.go", true},
		{"*.go", "x/y/a.go", true},
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/a.go", true},
		{"x/*.go", "x/y/a.go", false},
		{"x/**", "x/y/a.go", true},
		{"*.md", "a.go", false},
	} {
		if got := matchGlob(tc.glob, tc.path); got != tc.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
	}
}

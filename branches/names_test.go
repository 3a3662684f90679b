package branches_test

import (
	"context"
	"errors"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

const (
	nameNFC = "r\u00e9sum\u00e9.txt"   // precomposed, as shells send it
	nameNFD = "re\u0301sume\u0301.txt" // decomposed, as Cocoa apps send it
)

// The NFC and NFD spellings of a name are one path to merge: creating it
// on both sides is a conflict, not two twin files.
func TestMergeTreatsFormsAsOnePath(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "keep", "k")
	must(m.Fork(ctx, "main", "c"))(t)
	write(t, m, "c", nameNFC, "child")
	write(t, m, "main", nameNFD, "parent")
	_, err := m.Commit(ctx, "c")
	var ce *branches.ConflictError
	if !errors.As(err, &ce) || len(ce.Paths) != 1 {
		t.Fatalf("commit = %v, want one conflicting path", err)
	}
	if got := read(t, m, "main", nameNFC); got != "parent" {
		t.Errorf("main reads %q through the other form", got)
	}
}

// Diff reports a file replaced under the other spelling of its name as
// modified, not as one path added and another deleted.
func TestDiffTreatsFormsAsOnePath(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", nameNFC, "v1")
	must(m.Fork(ctx, "main", "c"))(t)
	fs, _, err := m.View("c")
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Billy().Remove(nameNFD); err != nil {
		t.Fatal(err)
	}
	write(t, m, "c", nameNFD, "v2")
	d := must(m.Diff(ctx, "c"))(t)
	if len(d.Changes) != 1 || d.Changes[0].Kind != branches.Modified || d.Changes[0].Path != nameNFD {
		t.Fatalf("diff = %+v, want one modified %q", d.Changes, nameNFD)
	}
}

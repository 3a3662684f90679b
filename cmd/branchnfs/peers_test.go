package main

import (
	"os"
	"slices"
	"testing"
)

func TestAllowedUIDs(t *testing.T) {
	dir := t.TempDir()
	want := uint32(os.Geteuid())
	if os.Geteuid() == 0 {
		want = 4242
		if err := os.Chown(dir, int(want), int(want)); err != nil {
			t.Fatal(err)
		}
	}
	got := allowedUIDs(dir)
	if !slices.Contains(got, want) || !slices.Contains(got, 0) || !slices.Contains(got, uint32(os.Geteuid())) {
		t.Fatalf("allowedUIDs = %v, want the owner %d, root and %d", got, want, os.Geteuid())
	}
}

package main

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestIgnoreFlag: init --ignore sets the store's ignore list, a later
// open keeps it, and a bad pattern is a usage error.
func TestIgnoreFlag(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	if code, _, stderr := runCLI(t, "init", "--store", store, "--ignore", "["); code != exitUsage || !strings.Contains(stderr, "invalid ignore pattern") {
		t.Fatalf("init --ignore '[': %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "init", "--store", store, "--ignore", "a//b"); code != exitUsage || !strings.Contains(stderr, "invalid ignore pattern") {
		t.Fatalf("init --ignore 'a//b': %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "init", "--store", store, "--ignore", "*.log", "--ignore", ".DS_Store", "--ignore", "node_modules/", "--ignore", "build/**"); code != 0 {
		t.Fatalf("init --ignore: %d %q", code, stderr)
	}
	s, err := openStore(context.Background(), store, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.mgr.Ignore(), []string{"*.log", ".DS_Store", "node_modules/", "build/**"}; !reflect.DeepEqual(got, want) {
		t.Errorf("store ignores %q, want %q", got, want)
	}
}

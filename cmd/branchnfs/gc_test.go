package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// TestGCCommand: gc prints the store's disk space before and after, or
// the same as JSON, and keeps what main holds.
func TestGCCommand(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	s := []string{"--store", store}
	if code, _, stderr := runCLI(t, append([]string{"init"}, s...)...); code != 0 {
		t.Fatalf("init: %d %q", code, stderr)
	}
	if code, out, stderr := runCLI(t, append([]string{"gc"}, s...)...); code != 0 || !strings.Contains(out, "store on disk: ") || !strings.Contains(out, "freed") {
		t.Fatalf("gc: %d %q %q", code, out, stderr)
	}
	// A store whose main holds 8 MiB.
	s2 := storeFrom(t, 8<<20, 7)
	code, out, stderr := runCLI(t, append([]string{"gc", "--json"}, s2...)...)
	var res branches.GCStats
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.DiskBefore < 8<<20 || res.DiskAfter < 8<<20 {
		t.Fatalf("gc --json with live data: %d %q %q", code, out, stderr)
	}
	// The import stored the file as chunks already: GC has nothing to
	// rechunk.
	if res.Rechunk.Blocks != 0 || res.Rechunk.Bytes != 0 || !strings.Contains(out, `"rechunk"`) {
		t.Fatalf("gc --json: rechunk %+v, want nothing rechunked after an import: %q", res.Rechunk, out)
	}
	if code, out, stderr := runCLI(t, append([]string{"gc"}, s2...)...); code != 0 || !strings.Contains(out, "rechunked 0 blocks into 0 new chunks (0 B read)") {
		t.Fatalf("second gc: %d %q %q", code, out, stderr)
	}
	if code, out, stderr := runCLI(t, append([]string{"gc", "extra"}, s2...)...); code != exitUsage {
		t.Fatalf("gc with an argument: %d %q %q", code, out, stderr)
	}
}

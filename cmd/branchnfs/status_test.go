package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// TestStatusAndUniqueBytes: status reports the store's space and branches
// without a server, list shows each branch's unique bytes, and aborting a
// branch moves what only it held into the reclaimable figure.
func TestStatusAndUniqueBytes(t *testing.T) {
	s := storeFrom(t, 2<<20, 11)
	code, out, stderr := runCLI(t, append([]string{"list", "--json"}, s...)...)
	var entries []listEntry
	if code != 0 || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 1 ||
		entries[0].UniqueBytes == nil || *entries[0].UniqueBytes != 2<<20 {
		t.Fatalf("list --json: want main holding 2 MiB alone: %d %q %q", code, out, stderr)
	}
	if code, out, _ := runCLI(t, append([]string{"list"}, s...)...); code != 0 || !strings.Contains(out, "UNIQUE") || !strings.Contains(out, "2.0 MiB") {
		t.Fatalf("list: %d %q", code, out)
	}
	// A fork shares main's layer: neither holds the file alone. (init
	// --from committed an import branch.)
	if code, _, stderr := runCLI(t, append([]string{"fork", "main", "b"}, s...)...); code != 0 {
		t.Fatalf("fork: %d %q", code, stderr)
	}
	code, out, _ = runCLI(t, append([]string{"list", "--json"}, s...)...)
	entries = nil
	if code != 0 || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 2 {
		t.Fatalf("list --json after fork: %d %q", code, out)
	}
	for _, e := range entries {
		if e.UniqueBytes == nil || *e.UniqueBytes != 0 {
			t.Fatalf("after the fork, %s holds unique bytes: %q", e.Name, out)
		}
	}
	code, out, stderr = runCLI(t, append([]string{"status"}, s...)...)
	if code != 0 || !strings.Contains(out, "server:       none runs") || !strings.Contains(out, "content:      2 MiB") ||
		!strings.Contains(out, "2 live, 0 invalidated, 1 committed, 0 aborted") || !strings.Contains(out, "on disk:") {
		t.Fatalf("status: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := runCLI(t, append([]string{"abort", "b"}, s...)...); code != 0 {
		t.Fatalf("abort: %d %q", code, stderr)
	}
	code, out, stderr = runCLI(t, append([]string{"status", "--json"}, s...)...)
	var st storeStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: %d %q %q", code, out, stderr)
	}
	if st.Server != nil || st.ContentBytes != 2<<20 || st.DiskBytes <= 0 || st.Branches[branches.StateAborted] != 1 ||
		st.Branches[branches.StateLive] != 1 || st.Reclaimable.DeadLayers == 0 || st.UniqueBytes["main"] != 2<<20 {
		t.Fatalf("status --json after abort: %q", out)
	}
	if !filepath.IsAbs(st.Store) {
		t.Fatalf("status --json: store %q is not absolute", st.Store)
	}
	if code, _, _ := runCLI(t, append([]string{"status", "extra"}, s...)...); code != exitUsage {
		t.Fatalf("status with an argument: %d", code)
	}
}

// TestStatusThroughServer: with a server running, status names it, and a
// server that cannot report space makes status fail and list go on
// without the column.
func TestStatusThroughServer(t *testing.T) {
	_, store := fakeServer(t, 12050)
	s := []string{"--store", store}
	code, _, stderr := runCLI(t, append([]string{"status"}, s...)...)
	if code == 0 || !strings.Contains(stderr, "cannot report its disk space") {
		t.Fatalf("status through a backend without space: %d %q", code, stderr)
	}
	code, out, stderr := runCLI(t, append([]string{"list"}, s...)...)
	if code != 0 || strings.Contains(out, "UNIQUE") || !strings.Contains(stderr, "unique bytes left out") {
		t.Fatalf("list through a backend without space: %d %q %q", code, out, stderr)
	}
}

// storeFrom makes a store with init --from a directory holding file big
// of size pseudo-random bytes (from seed), and returns its --store flag.
func storeFrom(t *testing.T, size int, seed uint32) []string {
	t.Helper()
	src := t.TempDir()
	p := make([]byte, size)
	x := seed
	for i := range p {
		x = x*1664525 + 1013904223
		p[i] = byte(x >> 24)
	}
	if err := os.WriteFile(filepath.Join(src, "big"), p, 0o644); err != nil {
		t.Fatal(err)
	}
	s := []string{"--store", filepath.Join(shortTempDir(t), "s")}
	if code, _, stderr := runCLI(t, append([]string{"init", "--from", src}, s...)...); code != 0 {
		t.Fatalf("init --from: %d %q", code, stderr)
	}
	return s
}

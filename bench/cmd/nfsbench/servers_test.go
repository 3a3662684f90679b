package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A server that exits during startup is reported, and stopping it does not
// wait for an exit status already taken (the bench hung there when a
// baseline build refused a store of a newer format).
func TestStartBranchnfsExitsDuringStartup(t *testing.T) {
	errc := make(chan error, 1)
	go func() {
		_, err := startBranchnfs("/bin/false", t.TempDir(), filepath.Join(t.TempDir(), "log"))
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "exited during startup") {
			t.Fatalf("startBranchnfs = %v, want an exited-during-startup error", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("startBranchnfs did not return after the server exited")
	}
}

// A long error keeps its start and its end: a server log's last line,
// which names the cause, survives.
func TestShortenKeepsTheEnd(t *testing.T) {
	long := "remove: f004314: nfs REMOVE: status 5; the server's log ends:\n" + strings.Repeat("time=x level=INFO msg=\"mount: granted\"\n", 40) + "level=WARN msg=\"cowfs: unexpected error\" err=\"transaction outcome unknown\""
	got := shorten(long)
	if !strings.HasPrefix(got, "remove: f004314") || !strings.HasSuffix(got, "transaction outcome unknown\"") {
		t.Fatalf("shorten lost the start or the end: %q", got)
	}
	if len(got) >= len(long) || strings.Contains(got, "\n") {
		t.Fatalf("shorten kept %d of %d bytes, or a newline", len(got), len(long))
	}
}

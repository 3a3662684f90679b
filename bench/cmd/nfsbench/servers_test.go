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

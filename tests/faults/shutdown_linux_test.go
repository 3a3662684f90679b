package faults

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestStopWithStoreGone: a server whose store directory was removed
// under it still exits on one SIGTERM (Badger retries a failed memtable
// flush forever; the store's Close is bounded), and says why it could not
// close cleanly. The server runs unprivileged.
func TestStopWithStoreGone(t *testing.T) {
	store, uid := unprivilegedStore(t)
	s := startServer(t, store, uid)
	if code, _, stderr := testbin.Run(t, binPath, testbin.User{UID: uid, GID: uid}, "fork", "main", "b", "--store", store); code != 0 {
		t.Fatalf("fork: %d %s", code, stderr)
	}
	if err := os.RemoveAll(filepath.Join(store, "db")); err != nil {
		t.Fatal(err)
	}
	s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.Done():
	case <-time.After(3 * time.Minute):
		t.Fatalf("branchnfs serve still runs 3 minutes after SIGTERM with its store gone\n%s", s.out.String())
	}
	if s.Err() == nil {
		t.Fatalf("branchnfs serve exited 0 with its store gone\n%s", s.out.String())
	}
	if out := s.out.String(); !strings.Contains(out, "close store") {
		t.Fatalf("branchnfs serve did not say why it could not close its store:\n%s", out)
	}
}

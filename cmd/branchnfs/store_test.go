package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// serveBriefly runs `branchnfs serve` in-process until it answers on its
// control socket, then stops it, and returns its exit code and stderr.
func serveBriefly(t *testing.T, store string, args ...string) (int, string) {
	t.Helper()
	return startServe(t, store, args...)()
}

// startServe runs `branchnfs serve` in-process until it answers on its
// control socket (or exits early); stop stops it and returns its exit
// code and stderr. The test's end stops it too.
func startServe(t *testing.T, store string, args ...string) (stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var o, e bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--store", store, "--listen", "127.0.0.1:0"}, args...), &o, &e)
	}()
	var once sync.Once
	var code int
	stop = func() (int, string) {
		once.Do(func() {
			cancel()
			code = <-done
			t.Logf("branchnfs serve %s -> %d\n%s%s", strings.Join(args, " "), code, o.String(), e.String())
		})
		return code, e.String()
	}
	t.Cleanup(func() { stop() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case c := <-done:
			done <- c
			return stop
		default:
		}
		if c, _, err := control.Dial(ctx, control.SocketPath(store), 200*time.Millisecond); err == nil {
			c.Close()
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s%s", o.String(), e.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A plain serve after an interrupted import keeps the marker and says how
// to redo the import, so that a later serve --from still does it.
func TestInterruptedImportSurvivesPlainServe(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	if code, _, _ := runCLI(t, "init", "--store", store); code != 0 {
		t.Fatal(code)
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	// Simulate the crash: the marker and a half-filled import branch.
	s, err := openStore(context.Background(), store, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.mgr.Fork(context.Background(), "main", importPrefix+"1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := writeImportMarker(store, src); err != nil {
		t.Fatal(err)
	}

	code, stderr := serveBriefly(t, store)
	if code != 0 || !strings.Contains(stderr, "was interrupted") || !strings.Contains(stderr, "serve --from "+src) {
		t.Fatalf("plain serve after an interrupted import: %d %q", code, stderr)
	}
	if !importPending(store) || pendingImportSource(store) != src {
		t.Fatalf("a plain serve dropped the import marker (source %q)", pendingImportSource(store))
	}
	if code, out, _ := runCLI(t, "list", "--store", store); code != 0 || strings.Contains(out, importPrefix) {
		t.Fatalf("the interrupted import branch is still there: %s", out)
	}

	code, stderr = serveBriefly(t, store, "--from", src)
	if code != 0 || !strings.Contains(stderr, "imported 1 files") || strings.Contains(stderr, "ignoring --from") {
		t.Fatalf("serve --from after an interrupted import: %d %q", code, stderr)
	}
	if importPending(store) {
		t.Fatal("the marker outlived a completed import")
	}
	s, err = openStore(context.Background(), store, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs, _, err := s.mgr.View("main")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Billy().Stat("f"); err != nil {
		t.Fatalf("main after the redone import: %v", err)
	}
}

// A failed import into an existing store keeps the marker too.
func TestFailedImportKeepsMarker(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	if code, _, _ := runCLI(t, "init", "--store", store); code != 0 {
		t.Fatal(code)
	}
	if err := writeImportMarker(store, "/nonexistent"); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "init", "--store", store, "--from", filepath.Join(t.TempDir(), "missing"))
	if code == 0 || !strings.Contains(stderr, "nothing was imported") {
		t.Fatalf("init --from a missing directory: %d %q", code, stderr)
	}
	if !importPending(store) {
		t.Fatal("a failed import removed the marker")
	}
	b, err := os.ReadFile(filepath.Join(store, importPendingName))
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "missing") {
		t.Fatalf("marker holds %q, %v", b, err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512M": 512 << 20, "512MiB": 512 << 20, "1G": 1 << 30, "2GiB": 2 << 30, "64k": 64 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1.5G", "12Q"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

// The logger a command opens the store with reaches the views of its
// branches: an unexpected error inside cowfs is logged there, not to the
// process's default logger.
func TestStoreLoggerReachesViews(t *testing.T) {
	ctx := context.Background()
	store := filepath.Join(shortTempDir(t), "s")
	var logBuf testbin.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := openStore(ctx, store, openOptions{create: true, logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Corrupt every inode record (cowfs keys: 'l' layer(8) 'i' ino(8)), so
	// that reading the root fails in a way cowfs does not expect.
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		var keys [][]byte
		err := tx.Iterate([]byte{'l'}, nil, true, func(k, _ []byte) (bool, error) {
			if len(k) == 18 && k[9] == 'i' {
				keys = append(keys, append([]byte(nil), k...))
			}
			return true, nil
		})
		for _, k := range keys {
			if err := tx.Set(k, []byte{0xff}); err != nil {
				return err
			}
		}
		if len(keys) == 0 {
			return errors.New("no inode records found")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	fs, _, err := s.mgr.View("main")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.GetAttr(cowfs.RootIno); !errors.Is(err, syscall.EIO) {
		t.Fatalf("GetAttr of a corrupt root: %v, want EIO", err)
	}
	if got := logBuf.String(); !strings.Contains(got, "cowfs: unexpected error") {
		t.Fatalf("the store's logger got %q, want cowfs's warning", got)
	}
}

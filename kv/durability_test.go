package kv_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// logNames lists the write-ahead and value logs in dir.
func logNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".mem") || strings.HasSuffix(e.Name(), ".vlog") {
			m[e.Name()] = true
		}
	}
	return m
}

func sortedKeys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// TestSyncCoversRotatedLogs checks that Sync fsyncs every log file a
// committed transaction may sit in, not only the newest ones: value logs
// rotate after 1 MiB and memtables after 1 MiB here, so by the time Sync
// runs there are complete logs that Badger's own DB.Sync would not touch.
func TestSyncCoversRotatedLogs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := kv.WithValueLogFileSize(kv.BadgerOptions{MemTableSize: 1 << 20, GCInterval: -1, Reserve: -1}, 1<<20)
	s, err := kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mu, synced := countFsyncs(s, filepath.Base, true)
	// 4 MiB of 8 KiB values (value log) and of small values (memtable).
	write := func(round int) { writeBigSmall(t, s, round, 64) }
	var complete []string // logs fsynced after a newer one existed
	for round := 0; round < 3; round++ {
		write(round)
		before := logNames(t, dir)
		mu.Lock()
		clear(synced)
		mu.Unlock()
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		after := logNames(t, dir)
		vlogs := 0
		for n := range before {
			if strings.HasSuffix(n, ".vlog") {
				vlogs++
			}
		}
		if vlogs < 2 {
			t.Fatalf("round %d: want rotated value logs, have %v", round, sortedKeys(before))
		}
		mu.Lock()
		for n := range before {
			if !after[n] {
				continue // flushed to a synced table meanwhile
			}
			if synced[n] == 0 && !contains(complete, n) {
				t.Errorf("round %d: %s held transactions committed before Sync and was not fsynced (fsynced: %v)", round, n, synced)
			}
		}
		for _, n := range complete {
			if synced[n] > 0 {
				t.Errorf("round %d: %s was complete and already fsynced, but fsynced again", round, n)
			}
		}
		if synced[filepath.Base(dir)] == 0 && round == 0 {
			t.Errorf("round %d: the directory that gained log files was not fsynced", round)
		}
		for n := range after {
			if synced[n] > 0 && n != newest(after, filepath.Ext(n)) {
				complete = append(complete, n)
			}
		}
		mu.Unlock()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(ctx, func(tx kv.Txn) error {
		n := 0
		err := tx.Iterate([]byte("big/"), nil, true, func(k, v []byte) (bool, error) { n++; return true, nil })
		if n != 3*64*8 {
			t.Errorf("after reopening: %d big values, want %d", n, 3*64*8)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// newest returns the log with the highest number among names ending in ext.
func newest(names map[string]bool, ext string) string {
	best, bestN := "", -1
	for n := range names {
		if filepath.Ext(n) != ext {
			continue
		}
		var id int
		fmt.Sscanf(strings.TrimSuffix(n, ext), "%d", &id)
		if id > bestN {
			best, bestN = n, id
		}
	}
	return best
}

// TestGroupSyncWaitsForALaterFsync checks that a caller arriving while an
// fsync runs gets the result of the next one, which started after it.
func TestGroupSyncWaitsForALaterFsync(t *testing.T) {
	started := make(chan int)
	release := make(chan error)
	var calls atomic.Int32
	syncFn := kv.NewGroupSync(func() error {
		n := int(calls.Add(1))
		started <- n
		return <-release
	})
	errA := make(chan error)
	go func() { errA <- syncFn() }()
	if n := <-started; n != 1 {
		t.Fatalf("first fsync is #%d", n)
	}
	errB := make(chan error)
	go func() { errB <- syncFn() }()
	// B may or may not be waiting yet; either way it must not be served by
	// fsync #1, which started before it called.
	release <- nil
	if err := <-errA; err != nil {
		t.Fatalf("A: %v", err)
	}
	if n := <-started; n != 2 {
		t.Fatalf("second fsync is #%d", n)
	}
	select {
	case err := <-errB:
		t.Fatalf("B returned %v before the fsync that started after it finished", err)
	default:
	}
	injected := errors.New("injected EIO")
	release <- injected
	if err := <-errB; !errors.Is(err, injected) || !errors.Is(err, kv.ErrSyncFailed) {
		t.Fatalf("B: %v, want the injected failure of fsync #2", err)
	}
}

// TestGroupSyncFailureSticks checks that a failed fsync is never hidden by
// a later success.
func TestGroupSyncFailureSticks(t *testing.T) {
	injected := errors.New("injected EIO")
	var calls atomic.Int32
	syncFn := kv.NewGroupSync(func() error {
		if calls.Add(1) == 1 {
			return injected
		}
		return nil
	})
	if err := syncFn(); !errors.Is(err, injected) {
		t.Fatalf("first sync: %v", err)
	}
	for i := 0; i < 3; i++ {
		err := syncFn()
		if !errors.Is(err, kv.ErrSyncFailed) || !errors.Is(err, injected) {
			t.Fatalf("sync after a failure: %v, want the first failure", err)
		}
		if !strings.Contains(err.Error(), "restart") {
			t.Errorf("error does not say what to do: %v", err)
		}
	}
}

// TestGroupSyncShares checks that concurrent callers share fsyncs and all
// get a result.
func TestGroupSyncShares(t *testing.T) {
	var calls atomic.Int32
	syncFn := kv.NewGroupSync(func() error { calls.Add(1); return nil })
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := syncFn(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if c := calls.Load(); c < 1 || c > 50 {
		t.Fatalf("%d fsyncs for 50 callers", c)
	}
}

// TestSyncKeepsFewDescriptors checks that Sync keeps descriptors open only
// for the directory and the logs still being written: memtables and value
// logs rotate after 1 MiB here, and logs that completed or that Badger
// removed must not keep a descriptor (or, removed, their disk space).
func TestSyncKeepsFewDescriptors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := kv.WithValueLogFileSize(kv.BadgerOptions{MemTableSize: 1 << 20, GCInterval: -1, Reserve: -1}, 1<<20)
	s, err := kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seen := map[string]bool{}
	for round := range 20 {
		writeBigSmall(t, s, round, 16)
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		fds := kv.LogFds(s)
		kinds := map[string]int{}
		for _, p := range fds {
			seen[p] = true
			kinds[filepath.Ext(p)]++
		}
		if len(fds) == 0 || kinds[".mem"] > 1 || kinds[".vlog"] > 1 || len(fds) > 3 {
			t.Fatalf("round %d: descriptors open after Sync: %v; want the directory and at most the newest write-ahead and value log", round, fds)
		}
	}
	if len(seen) < 4 {
		t.Fatalf("the logs never rotated: descriptors kept %v", sortedKeys(seen))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fds := kv.LogFds(s); len(fds) != 0 {
		t.Fatalf("descriptors open after Close: %v", fds)
	}
}

// TestSyncSkipsUnwrittenValueLog checks that Sync fsyncs the current value
// log only when something was written to it since its last fsync: a
// transaction of small values dirties the write-ahead log alone, one with
// a value at the threshold or above dirties the value log too.
func TestSyncSkipsUnwrittenValueLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := kv.BadgerOptions{GCInterval: -1, Reserve: -1}
	opts.EnsureDefaults()
	s, err := kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mu, synced := countFsyncs(s, filepath.Ext, false)
	round := func(name string, value int) map[string]int {
		t.Helper()
		err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(name), make([]byte, value)) })
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		clear(synced)
		mu.Unlock()
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(synced)
	}
	small, big := int(opts.ValueThreshold)-1, int(opts.ValueThreshold)
	if got := round("first", small); got[".vlog"] != 1 || got[".mem"] != 1 {
		t.Fatalf("first Sync after open fsynced %v, want the write-ahead log and the value log", got)
	}
	for i := range 3 {
		if got := round(fmt.Sprint("small", i), small); got[".vlog"] != 0 || got[".mem"] != 1 {
			t.Fatalf("a value of %d bytes (threshold %d): fsynced %v, want the write-ahead log alone", small, opts.ValueThreshold, got)
		}
		if got := round(fmt.Sprint("big", i), big); got[".vlog"] != 1 || got[".mem"] != 1 {
			t.Fatalf("a value of %d bytes: fsynced %v, want the write-ahead log and the value log", big, got)
		}
	}
}

// countFsyncs makes Sync count its fsyncs of s's logs in synced, by
// key(path), under mu; with real, it fsyncs them too.
func countFsyncs(s kv.Store, key func(string) string, real bool) (mu *sync.Mutex, synced map[string]int) {
	mu, synced = new(sync.Mutex), map[string]int{}
	kv.SetLogFsync(s, func(path string) error {
		mu.Lock()
		synced[key(path)]++
		mu.Unlock()
		if !real {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
	return mu, synced
}

// writeBigSmall commits n transactions, each of 8 values of 8 KiB (the
// value log) and 8 of 500 bytes (the write-ahead log), under keys of round.
func writeBigSmall(t *testing.T, s kv.Store, round, n int) {
	t.Helper()
	for i := range n {
		err := s.Update(context.Background(), func(tx kv.Txn) error {
			for j := range 8 {
				k := fmt.Sprintf("r%d/%03d/%d", round, i, j)
				if err := tx.Set([]byte("big/"+k), make([]byte, 8<<10)); err != nil {
					return err
				}
				if err := tx.Set([]byte("small/"+k), make([]byte, 500)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

package branches_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// TestIdleGC: rounds of fork → rewrite → commit sweep nothing (the
// replaced versions stay in main's lower layers) and stay far below
// GCAfterSwept; once the store is idle, the reclaimer prunes them and
// gives their space back by itself.
func TestIdleGC(t *testing.T) {
	// Back to back, the idle reclaimer may run after any round or after
	// the last only. With a pause after each round (the test waits for
	// the idle reclaimer to prune the version the round replaced), it
	// runs after every round, and prunes versions a GC before rechunked.
	for _, pause := range []bool{false, true} {
		t.Run(fmt.Sprintf("pause=%v", pause), func(t *testing.T) { testIdleGC(t, pause) })
	}
}

func testIdleGC(t *testing.T, pause bool) {
	// Each round replaces 4 MiB, what the idle reclaimer waits for before
	// it gives space back, so that every pause gives the space back
	// however the rounds and the pauses interleave.
	const size, rounds = 4 << 20, 4
	ctx := context.Background()
	dir := t.TempDir()
	st, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1, ValueLogFileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: 10 * time.Millisecond, GCIdle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()
	gcWrite(t, m, "main", "big", gcData(0, size))
	var want []byte
	for i := 1; i <= rounds; i++ {
		name := fmt.Sprintf("r%d", i)
		if _, err := m.Fork(ctx, "main", name); err != nil {
			t.Fatal(err)
		}
		want = gcData(uint64(i), size)
		gcWrite(t, m, name, "big", want)
		if _, err := m.Commit(ctx, name); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Minute); pause; time.Sleep(20 * time.Millisecond) {
			rep, err := m.Space(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.ContentBytes <= size {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the idle reclaimer did not prune the replaced version in 2 minutes: %+v", i, rep)
			}
		}
	}
	// Wait for the reclaimer (a liveness bound, not a speed target).
	var rep branches.SpaceReport
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if rep, err = m.Space(ctx); err != nil {
			t.Fatal(err)
		}
		if rep.ContentBytes <= size && rep.Reclaimable.ValueLogGarbage < size {
			break
		}
	}
	t.Logf("%+v", rep)
	if rep.ContentBytes > size {
		t.Fatalf("idle store still holds %d bytes of content, want the live %d: the replaced versions were not pruned", rep.ContentBytes, size)
	}
	if rep.Reclaimable.ValueLogGarbage >= size {
		t.Fatalf("idle store keeps %d bytes of deleted values in its logs: the space was not given back", rep.Reclaimable.ValueLogGarbage)
	}
	if got := gcRead(t, m, "main", "big"); !bytes.Equal(got, want) {
		t.Fatal("main's file reads other bytes after the idle GC")
	}
}

// TestIdleGCWaitsForActivity: client work (NoteActivity, which the NFS
// server calls for READs, WRITEs and changes) postpones the idle GC past
// GCIdle, and once it stops the idle GC runs; work without a pause
// postpones it only up to a bound.
func TestIdleGCWaitsForActivity(t *testing.T) {
	for _, pause := range []bool{true, false} {
		t.Run(fmt.Sprintf("pause=%v", pause), func(t *testing.T) { testIdleGCActivity(t, pause) })
	}
}

func testIdleGCActivity(t *testing.T, pause bool) {
	const size = 4 << 20
	const idle = 500 * time.Millisecond
	ctx := context.Background()
	st, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, ValueLogFileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: 10 * time.Millisecond, GCIdle: idle})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()
	gcWrite(t, m, "main", "big", gcData(0, size))
	if _, err := m.Fork(ctx, "main", "r1"); err != nil {
		t.Fatal(err)
	}
	want := gcData(1, size)
	gcWrite(t, m, "r1", "big", want)
	// The commit's reclaimer pass arms the idle GC; work starts at once.
	if _, err := m.Commit(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	pruned := func() bool {
		rep, err := m.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep.ContentBytes <= size
	}
	start := time.Now()
	work := 3 * idle // well under the bound of 6 GCIdle after the pass
	if !pause {
		work = 2 * time.Minute // until the GC ran
	}
	ran := false // seen pruned once: a later rechunk may add chunk content back for a while
	for time.Since(start) < work {
		m.NoteActivity()
		time.Sleep(20 * time.Millisecond)
		if pruned() {
			if pause {
				t.Fatalf("the idle GC ran %v after the commit while clients worked (GCIdle %v)", time.Since(start).Round(time.Millisecond), idle)
			}
			ran = true
			break
		}
	}
	if !pause {
		if !ran {
			t.Fatal("work without a pause postponed the idle GC for 2 minutes")
		}
		t.Logf("ran %v after the commit, with work going on", time.Since(start).Round(time.Millisecond))
		return
	}
	// Wait for the reclaimer (a liveness bound, not a speed target).
	for deadline := time.Now().Add(2 * time.Minute); !pruned(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle GC did not run in 2 minutes after the work stopped")
		}
	}
	if got := gcRead(t, m, "main", "big"); !bytes.Equal(got, want) {
		t.Fatal("main's file reads other bytes after the idle GC")
	}
}

package branches_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

func gcData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 9))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func gcWrite(t *testing.T, m *branches.Manager, branch, name string, data []byte) {
	t.Helper()
	v, _, err := m.View(branch)
	if err != nil {
		t.Fatal(err)
	}
	a, err := v.Create(cowfs.RootIno, name, cowfs.CreateUnchecked, cowfs.NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
}

func gcRead(t *testing.T, m *branches.Manager, branch, name string) []byte {
	t.Helper()
	v, _, err := m.View(branch)
	if err != nil {
		t.Fatal(err)
	}
	a, err := v.Lookup(cowfs.RootIno, name)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, a.Size+1)
	n, _, err := v.ReadAt(a.Ino, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p[:n]
}

// TestGC: after rounds of fork, write, abort (or rewrite and commit), GC
// gives the disk space of what the rounds left behind back, and the
// files read the same, also after a reopen.
func TestGC(t *testing.T) {
	const size, rounds = 4 << 20, 6
	for _, workload := range []string{"abort", "commit"} {
		t.Run(workload, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			open := func() (kv.Store, *branches.Manager) {
				st, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
				if err != nil {
					t.Fatal(err)
				}
				return st, m
			}
			st, m := open()
			gcWrite(t, m, "main", "big", gcData(0, size))
			if err := st.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			base, err := kv.DiskUsage(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := gcData(0, size)
			for i := 1; i <= rounds; i++ {
				name := fmt.Sprintf("r%d", i)
				if _, err := m.Fork(ctx, "main", name); err != nil {
					t.Fatal(err)
				}
				if workload == "abort" {
					gcWrite(t, m, name, "new", gcData(uint64(i), size))
					if _, err := m.Abort(ctx, name); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want = gcData(uint64(i), size)
				gcWrite(t, m, name, "big", want)
				if _, err := m.Commit(ctx, name); err != nil {
					t.Fatal(err)
				}
			}
			gs, err := m.GC(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("base %d, GC %+v", base, gs)
			if gs.DiskBefore < base+rounds*size {
				t.Fatalf("before GC the store holds %d bytes: the rounds' data is not on disk", gs.DiskBefore)
			}
			// What is left: the live file, in logs at most a fifth
			// garbage, plus the log being written and the tables.
			if limit := base + size/4 + 2<<20; gs.DiskAfter > limit {
				t.Errorf("after GC the store holds %d bytes, want at most %d (base %d)", gs.DiskAfter, limit, base)
			}
			if workload == "commit" && gs.Pruned < (rounds-1)*size/(32<<10) {
				t.Errorf("pruned %d references, want the %d the commits hid", gs.Pruned, (rounds-1)*size/(32<<10))
			}
			if got := gcRead(t, m, "main", "big"); !bytes.Equal(got, want) {
				t.Fatal("main's file reads other bytes after GC")
			}
			m.Close()
			st.Close()
			st, m = open()
			defer func() { m.Close(); st.Close() }()
			if got := gcRead(t, m, "main", "big"); !bytes.Equal(got, want) {
				t.Fatal("main's file reads other bytes after GC and a reopen")
			}
		})
	}
}

// TestGCInBackground: the reclaimer gives the space back by itself once
// its sweeps deleted GCAfterSwept bytes.
func TestGCInBackground(t *testing.T) {
	const size = 4 << 20
	ctx := context.Background()
	dir := t.TempDir()
	st, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: time.Millisecond, GCAfterSwept: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("r%d", i)
		if _, err := m.Fork(ctx, "main", name); err != nil {
			t.Fatal(err)
		}
		gcWrite(t, m, name, "new", gcData(uint64(i), size))
		if err := st.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Abort(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// Wait (generously: the machine may be slow) for the space to come
	// back; the store held more than 16 MiB.
	var du int64
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if du, err = kv.DiskUsage(dir); err != nil {
			t.Fatal(err)
		}
		if du < 6<<20 {
			return
		}
	}
	t.Fatalf("the store still holds %d bytes: the reclaimer never gave the space back", du)
}

// TestGCReportsRechunk: GC's stats tell what its rechunking did: a file
// written in fixed blocks is read once and its blocks swapped for chunk
// references; the next GC finds nothing left to rechunk.
func TestGCReportsRechunk(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	m := openForGC(t)
	gcWrite(t, m, "main", "big", gcData(1, size))
	gs, err := m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gs.Rechunk.Bytes != size || gs.Rechunk.Blocks != size/(32<<10) || gs.Rechunk.Chunks < size/(128<<10) {
		t.Fatalf("first GC rechunked %+v, want %d blocks (%d bytes) in at least %d chunks", gs.Rechunk, size/(32<<10), size, size/(128<<10))
	}
	gs, err = m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gs.Rechunk != (cowfs.RechunkStats{}) {
		t.Fatalf("second GC rechunked %+v, want nothing", gs.Rechunk)
	}
}

// TestGCRechunksAfterPrune: GC prunes the hidden versions of a file that
// fast-path commits rewrote before it rechunks, so it chunks only the
// blocks still visible, not those the prune deletes next. Before, it
// rechunked every committed version (all 7 here), then pruned 6 of them.
func TestGCRechunksAfterPrune(t *testing.T) {
	const size, rounds, bs = 1 << 20, 6, 32 << 10
	ctx := context.Background()
	m := openForGC(t)
	want := gcData(0, size)
	gcWrite(t, m, "main", "big", want)
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
	}
	gs, err := m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GC %+v", gs)
	const blocks = size / bs // per version
	if gs.Pruned < (rounds-1)*blocks {
		t.Fatalf("pruned %d references, want at least the %d of the %d versions the commits hid", gs.Pruned, (rounds-1)*blocks, rounds-1)
	}
	// Every version's blocks are either pruned or rechunked, never both.
	if gs.Rechunk.Blocks+gs.Pruned != (rounds+1)*blocks {
		t.Fatalf("rechunked %d blocks and pruned %d references, want the %d blocks written split between them", gs.Rechunk.Blocks, gs.Pruned, (rounds+1)*blocks)
	}
	if got := gcRead(t, m, "main", "big"); !bytes.Equal(got, want) {
		t.Fatal("main's file reads other bytes after GC")
	}
}

// openForGC opens a Manager on a Badger store on disk with no background
// reclaimer or value-log GC: only the test's own GC calls run.
func openForGC(t *testing.T) *branches.Manager {
	t.Helper()
	st, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(context.Background(), branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	return m
}

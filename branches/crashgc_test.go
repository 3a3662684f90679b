package branches_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// The GC crash test kills a child process (this test binary) with
// SIGKILL in the middle of the work that gives space back, and checks
// after each kill that no acknowledged byte is lost and that no content a
// file still references was deleted: every file of every live branch reads
// back (by hash for main's), before and after a full GC. The child kills
// itself, so each kill lands where it is meant to:
//   - sweep: inside GC, at a random content deletion of the block sweep
//     (some sweep batches committed, the current one not);
//   - rewrite: inside the store's value-log rewriting, after a random
//     number of value logs were rewritten and deleted;
//   - commit: in a random transaction of a merge commit while GC runs
//     beside it.
// Before its phase, each round leaves garbage (a branch of 8 MiB aborted)
// and shadowed versions (a file rewritten and committed three times).

const crashGCChildEnv = "BRANCHNFS_CRASHGC_CHILD"

var crashGCPhases = []string{"sweep", "rewrite", "commit"}

func crashGCOpts() kv.BadgerOptions {
	return kv.BadgerOptions{GCInterval: -1, MemTableSize: 4 << 20, ValueLogFileSize: 1 << 20}
}

// killStore runs a kv.Store and SIGKILLs the process when armed and a
// count is reached: the killAtDelete-th deletion of a content key, or the
// killAtUpdate-th transaction, each before it commits.
type killStore struct {
	kv.Store
	armed        atomic.Bool
	killAtDelete int64
	killAtUpdate int64
	deletes      atomic.Int64
	updates      atomic.Int64
}

func die() { syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }

func (s *killStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return s.Store.Update(ctx, func(tx kv.Txn) error {
		if err := fn(killTxn{tx, s}); err != nil {
			return err
		}
		if s.armed.Load() && s.killAtUpdate > 0 && s.updates.Add(1) >= s.killAtUpdate {
			die()
		}
		return nil
	})
}

type killTxn struct {
	kv.Txn
	s *killStore
}

func (t killTxn) Delete(k []byte) error {
	// Content keys (cowfs's layout: 'c' and a 32-byte hash).
	if t.s.armed.Load() && t.s.killAtDelete > 0 && len(k) == 33 && k[0] == 'c' && t.s.deletes.Add(1) >= t.s.killAtDelete {
		die()
	}
	return t.Txn.Delete(k)
}

// killAfterRewrites kills the process once n value logs of dir were
// deleted (rewritten) since the call.
func killAfterRewrites(dir string, n int) {
	logs := func() map[string]bool {
		m := map[string]bool{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".vlog") {
				m[e.Name()] = true
			}
		}
		return m
	}
	seen := logs()
	gone := 0
	for {
		now := logs()
		for f := range seen {
			if !now[f] {
				gone++
			}
		}
		for f := range now {
			seen[f] = true
		}
		for f := range seen {
			if !now[f] {
				delete(seen, f)
			}
		}
		if gone >= n {
			die()
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// TestCrashGCChild is the child process; it does nothing in a normal run.
func TestCrashGCChild(t *testing.T) {
	spec := os.Getenv(crashGCChildEnv)
	if spec == "" {
		return
	}
	var seed uint64
	var round int
	var phase, dir string
	if _, err := fmt.Sscanf(spec, "%d %d %s %s", &seed, &round, &phase, &dir); err != nil {
		fmt.Println("ERR bad spec", spec)
		os.Exit(2)
	}
	if err := crashGCChild(dir, phase, seed, round); err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func crashGCChild(dir, phase string, seed uint64, round int) error {
	ctx := context.Background()
	st, err := kv.OpenBadger(dir, crashGCOpts())
	if err != nil {
		return err
	}
	ks := &killStore{Store: st}
	m, err := branches.Open(ctx, branches.Options{Store: ks, ReclaimDelay: -1, FS: cowfs.Options{BlockSize: 8192}})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	say := func(s string) { os.Stdout.Write([]byte(s + "\n")) }
	data := func(n int) []byte {
		p := make([]byte, n)
		for i := 0; i+8 <= n; i += 8 {
			x := rng.Uint64()
			for j := 0; j < 8; j++ {
				p[i+j] = byte(x >> (8 * j))
			}
		}
		return p
	}
	put := func(branch, name string, p []byte) error {
		v, _, err := m.View(branch)
		if err != nil {
			return err
		}
		a, err := v.Create(cowfs.RootIno, name, cowfs.CreateUnchecked, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			return err
		}
		size := uint64(0)
		if _, err := v.SetAttr(a.Ino, cowfs.SetAttr{Size: &size}); err != nil {
			return err
		}
		for off := 0; off < len(p); off += 1 << 20 {
			if _, err := v.WriteAt(a.Ino, p[off:min(off+1<<20, len(p))], int64(off)); err != nil {
				return err
			}
		}
		return nil
	}
	// Garbage: a branch of 8 MiB, aborted.
	g := fmt.Sprintf("g%d", round)
	if _, err := m.Fork(ctx, "main", g); err != nil {
		return err
	}
	for i := 0; i < 4; i++ {
		if err := put(g, fmt.Sprintf("x%d", i), data(2<<20)); err != nil {
			return err
		}
	}
	if _, err := m.Abort(ctx, g); err != nil {
		return err
	}
	// Shadowed versions: big rewritten and committed (fast path) 3 times.
	for i := 0; i < 3; i++ {
		c := fmt.Sprintf("v%d-%d", round, i)
		if _, err := m.Fork(ctx, "main", c); err != nil {
			return err
		}
		p := data(1 << 20)
		if err := put(c, "big", p); err != nil {
			return err
		}
		say(fmt.Sprintf("BEGIN %s big %s", c, sha(p)))
		if _, err := m.Commit(ctx, c); err != nil {
			return err
		}
		say("ACK " + c)
	}
	// A file written in main directly, acknowledged once synced.
	name := fmt.Sprintf("r%d-m", round)
	p := data(512 << 10)
	say(fmt.Sprintf("BEGIN %s %s %s", name, name, sha(p)))
	if err := put("main", name, p); err != nil {
		return err
	}
	if err := st.Sync(ctx); err != nil {
		return err
	}
	say("ACK " + name)

	switch phase {
	case "sweep":
		ks.killAtDelete = 1 + int64(rng.IntN(900))
		ks.armed.Store(true)
		say("PHASE sweep")
		if _, err := m.GC(ctx); err != nil {
			return err
		}
	case "rewrite":
		if _, err := m.Reclaim(ctx); err != nil { // the garbage the logs then hold
			return err
		}
		go killAfterRewrites(dir, 1+rng.IntN(3))
		say("PHASE rewrite")
		if _, err := st.ReclaimSpace(ctx); err != nil {
			return err
		}
	case "commit":
		k := fmt.Sprintf("k%d", round)
		if _, err := m.Fork(ctx, "main", k); err != nil {
			return err
		}
		kp, bp := data(1<<20), data(1<<20)
		if err := put(k, fmt.Sprintf("r%d-k", round), kp); err != nil {
			return err
		}
		if err := put(k, "big", bp); err != nil {
			return err
		}
		// main changes too: the commit merges.
		m2 := fmt.Sprintf("r%d-m2", round)
		p2 := data(256 << 10)
		say(fmt.Sprintf("BEGIN %s %s %s", m2, m2, sha(p2)))
		if err := put("main", m2, p2); err != nil {
			return err
		}
		if err := st.Sync(ctx); err != nil {
			return err
		}
		say("ACK " + m2)
		say("PHASE commit")
		say(fmt.Sprintf("BEGIN %s r%d-k %s big %s", k, round, sha(kp), sha(bp)))
		ks.killAtUpdate = 1 + int64(rng.IntN(6))
		ks.armed.Store(true)
		gcDone := make(chan error, 1)
		go func() { _, err := m.GC(ctx); gcDone <- err }()
		if _, err := m.Commit(ctx, k); err != nil {
			return err
		}
		say("ACK " + k)
		if err := <-gcDone; err != nil {
			return err
		}
	}
	say("END " + phase)
	m.Close()
	return st.Close()
}

func TestCrashGC(t *testing.T) {
	if os.Getenv(crashGCChildEnv) != "" {
		t.Skip("in the child")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rounds := 2 * len(crashGCPhases)
	t.Logf("seed %d (rerun: go test ./branches -run 'TestCrashGC$' -crash.seed %d)", seed, seed)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // main's files: name -> sha256
	mid := map[string]int{}
	for round := 0; round < rounds; round++ {
		phase := crashGCPhases[round%len(crashGCPhases)]
		cmd := exec.Command(exe, "-test.run", "^TestCrashGCChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s", crashGCChildEnv, seed, round, phase, dir))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var lines []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		werr := cmd.Wait()
		var ee *exec.ExitError
		killed := errors.As(werr, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if werr != nil && !killed {
			t.Fatalf("round %d (%s): child failed: %v\n%s\nstderr:\n%s", round, phase, werr, tail(lines, 20), stderr.String())
		}
		// Acknowledged files, and the one operation in flight.
		var pending map[string]string
		inPhase := false
		for _, l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 0:
			case f[0] == "ERR":
				t.Fatalf("round %d: child: %s", round, l)
			case f[0] == "BEGIN":
				pending = map[string]string{}
				for i := 2; i+1 < len(f); i += 2 {
					pending[f[i]] = f[i+1]
				}
			case f[0] == "ACK":
				for n, h := range pending {
					want[n] = h
				}
				pending = nil
			case f[0] == "PHASE":
				inPhase = true
			case f[0] == "END":
				inPhase = false
			}
		}
		if killed && inPhase {
			mid[phase]++
		}
		st, err := kv.OpenBadger(dir, crashGCOpts())
		if err != nil {
			t.Fatalf("round %d (%s): reopen after SIGKILL: %v", round, phase, err)
		}
		m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1, FS: cowfs.Options{BlockSize: 8192}})
		if err != nil {
			t.Fatalf("round %d (%s): open after SIGKILL: %v", round, phase, err)
		}
		check := func(when string) {
			t.Helper()
			got, err := readBranch(m, "main")
			if err != nil {
				t.Fatalf("round %d (%s), %s: read main: %v", round, phase, when, err)
			}
			// The operation in flight is all there or not at all.
			var applied, missing []string
			for n, h := range pending {
				if sha(got[n]) == h {
					applied = append(applied, n)
				} else {
					missing = append(missing, n)
				}
			}
			if len(applied) > 0 && len(missing) > 0 {
				t.Fatalf("round %d (%s), %s: the interrupted operation is half there: %v applied, %v not", round, phase, when, applied, missing)
			}
			for n, h := range want {
				if _, ok := pending[n]; ok && len(applied) > 0 {
					continue
				}
				if sha(got[n]) != h {
					t.Fatalf("round %d (%s), %s: main's %s reads %d bytes hashing %.12s, want %.12s\nlast lines:\n%s",
						round, phase, when, n, len(got[n]), sha(got[n]), h, tail(lines, 8))
				}
			}
			// Every live branch reads back whole: no content it uses is gone.
			infos, err := m.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range infos {
				if in.State == branches.StateLive {
					if _, err := readBranch(m, in.Name); err != nil {
						t.Fatalf("round %d (%s), %s: branch %s does not read back: %v", round, phase, when, in.Name, err)
					}
				}
			}
			if len(applied) > 0 {
				for n, h := range pending {
					want[n] = h
				}
			}
		}
		check("after the kill")
		infos, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if in.State == branches.StateLive && in.Name != branches.MainBranch {
				if _, err := m.Abort(ctx, in.Name); err != nil {
					t.Fatal(err)
				}
			}
		}
		pending = nil
		if _, err := m.GC(ctx); err != nil {
			t.Fatalf("round %d (%s): GC after the kill: %v", round, phase, err)
		}
		check("after a full GC")
		m.Close()
		st.Close()
		t.Logf("round %d: %s, killed=%v mid-phase=%v, %d files in main", round, phase, killed, killed && inPhase, len(want))
	}
	for _, ph := range crashGCPhases {
		if mid[ph] == 0 {
			t.Errorf("no kill landed inside %s in %d rounds", ph, rounds)
		}
	}
}

package branches_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// chunkyContent is version v of a file tagged tag: pseudo-random bytes
// (so that chunk boundaries fall inside it) with (tag, v) in front.
func chunkyContent(tag, v uint32, size int) []byte {
	p := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(tag), uint64(v)))
	for i := 0; i+8 <= size; i += 8 {
		binary.LittleEndian.PutUint64(p[i:], r.Uint64())
	}
	binary.BigEndian.PutUint32(p, tag)
	binary.BigEndian.PutUint32(p[4:], v)
	return p
}

// checkChunky reports whether p is a prefix of a version of tag.
func checkChunky(p []byte, tag uint32, size int) error {
	if len(p) < 8 {
		return nil
	}
	if t := binary.BigEndian.Uint32(p); t != tag {
		return fmt.Errorf("tag %d, want %d", t, tag)
	}
	want := chunkyContent(tag, binary.BigEndian.Uint32(p[4:]), size)
	if len(p) > size || !bytes.Equal(p, want[:len(p)]) {
		return fmt.Errorf("%d bytes are not a prefix of version %d", len(p), binary.BigEndian.Uint32(p[4:]))
	}
	return nil
}

func readFile(fs *cowfs.View, name string, max int) ([]byte, error) {
	f, err := fs.Billy().Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, max+1)
	n, err := f.(io.ReaderAt).ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return buf[:n], nil
}

// TestRechunkConcurrent runs rechunking (into chunks, then extents) and GC
// in a loop while branches
// rewrite and truncate multi-block files, readers check every read is a
// prefix of one whole version, and a lifecycle goroutine forks, writes,
// commits and checkpoints. Every branch must end with exactly its last
// versions, and a sweep afterwards must leave every file readable. Run it
// with -race.
func TestRechunkConcurrent(t *testing.T) {
	ctx := context.Background()
	st, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, MemTableSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, FS: cowfs.Options{BlockSize: 4096}, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()
	const size = 96<<10 + 100
	const files = 3
	writes := 60
	if testing.Short() {
		writes = 15
	}
	workers := []string{"w0", "w1"}
	mainFS, _, err := m.View("main")
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < files; k++ {
		if err := writeWhole(mainFS, fmt.Sprintf("f%d", k), chunkyContent(uint32(900+k), 0, size)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.GC(ctx); err != nil { // rechunks main's files before the forks
		t.Fatal(err)
	}
	for _, w := range workers {
		if _, err := m.Fork(ctx, "main", w); err != nil {
			t.Fatal(err)
		}
	}
	tag := func(w, k int) uint32 { return uint32(100*w + k + 1) }
	var failures atomic.Int32
	errorf := func(format string, args ...any) {
		if failures.Add(1) <= 20 {
			t.Errorf(format, args...)
		}
	}
	var last [2][files]uint32
	var writers, others sync.WaitGroup
	stop := make(chan struct{})
	for w, name := range workers {
		fs, _, err := m.View(name)
		if err != nil {
			t.Fatal(err)
		}
		writers.Add(1)
		go func() {
			defer writers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for v := uint32(1); v <= uint32(writes); v++ {
				k := r.IntN(files)
				if r.IntN(4) == 0 {
					sz := uint64(r.IntN(size))
					a, err := fs.Lookup(cowfs.RootIno, fmt.Sprintf("f%d", k))
					if err == nil {
						_, err = fs.SetAttr(a.Ino, cowfs.SetAttr{Size: &sz})
					}
					if err != nil {
						errorf("%s: truncate: %v", workers[w], err)
						return
					}
				}
				if err := writeWhole(fs, fmt.Sprintf("f%d", k), chunkyContent(tag(w, k), v, size)); err != nil {
					errorf("%s: write: %v", workers[w], err)
					return
				}
				last[w][k] = v
			}
		}()
		others.Add(1)
		go func() {
			defer others.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for k := 0; k < files; k++ {
					p, err := readFile(fs, fmt.Sprintf("f%d", k), size)
					if err != nil {
						errorf("%s: read f%d: %v", workers[w], k, err)
						return
					}
					if len(p) >= 8 && binary.BigEndian.Uint32(p) == uint32(900+k) {
						err = checkChunky(p, uint32(900+k), size) // still main's version
					} else {
						err = checkChunky(p, tag(w, k), size)
					}
					if err != nil {
						errorf("%s: read f%d: %v", workers[w], k, err)
						return
					}
				}
			}
		}()
	}
	var rechunked, extents atomic.Int64
	others.Add(1)
	go func() { // rechunking and GC
		defer others.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rs, err := m.Rechunk(ctx)
			if err != nil {
				errorf("rechunk: %v", err)
				return
			}
			rechunked.Add(int64(rs.Blocks))
			extents.Add(int64(rs.Extents))
			gs, err := m.GC(ctx)
			if err != nil {
				errorf("gc: %v", err)
				return
			}
			// GC rechunks too: whichever of the two finds a layer frozen
			// meanwhile does the rechunking the writers must survive.
			rechunked.Add(int64(gs.Rechunk.Blocks))
			extents.Add(int64(gs.Rechunk.Extents))
		}
	}()
	committed := map[string][]byte{}
	others.Add(1)
	go func() { // lifecycle: fork w0, write, commit; checkpoint w1
		defer others.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c := fmt.Sprintf("c%d", i)
			if _, err := m.Fork(ctx, "w0", c); err != nil {
				errorf("fork %s: %v", c, err)
				return
			}
			fs, _, err := m.View(c)
			if err != nil {
				errorf("view %s: %v", c, err)
				return
			}
			data := chunkyContent(uint32(5000+i), 0, size)
			name := fmt.Sprintf("new%d", i)
			if err := writeWhole(fs, name, data); err != nil {
				errorf("write %s: %v", name, err)
				return
			}
			if _, err := m.Commit(ctx, c); err != nil {
				errorf("commit %s: %v", c, err)
				return
			}
			committed[name] = data
			if _, err := m.Checkpoint(ctx, "w1", fmt.Sprintf("cp%d", i)); err != nil {
				errorf("checkpoint: %v", err)
				return
			}
		}
	}()
	writers.Wait()
	close(stop)
	others.Wait()
	if _, err := m.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if rechunked.Load() == 0 {
		t.Fatal("no block was rechunked while the writers ran: the test exercised nothing")
	}
	if extents.Load() == 0 {
		t.Fatal("no extent was written while the writers ran: writes never met extents")
	}
	for w, name := range workers {
		fs, _, err := m.View(name)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < files; k++ {
			want := chunkyContent(uint32(900+k), 0, size)
			if v := last[w][k]; v > 0 {
				want = chunkyContent(tag(w, k), v, size)
			}
			got, err := readFile(fs, fmt.Sprintf("f%d", k), size)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: f%d reads %d bytes (%v), want version %d (%d bytes)", name, k, len(got), err, last[w][k], len(want))
			}
		}
	}
	fs, _, err := m.View("w0")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range committed {
		if got, err := readFile(fs, name, size); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("w0: committed %s reads %d bytes (%v), want %d", name, len(got), err, len(want))
		}
	}
}

const rechunkCrashEnv = "BRANCHNFS_RECHUNK_CRASH_CHILD"

// TestRechunkCrashChild is the child of TestRechunkCrash; it does nothing
// in a normal run.
func TestRechunkCrashChild(t *testing.T) {
	spec := os.Getenv(rechunkCrashEnv)
	if spec == "" {
		return
	}
	var dir string
	var round int
	if _, err := fmt.Sscanf(spec, "%d %s", &round, &dir); err != nil {
		fmt.Println("ERR bad spec", spec)
		os.Exit(2)
	}
	if err := rechunkCrashChild(dir, round); err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// crashFile is file i of a round: shifted slices of one random base, so
// that rechunking finds chunks it stored before.
func crashFile(round, i int) []byte {
	base := chunkyContent(7, 7, 1<<20)
	r := rand.New(rand.NewPCG(uint64(round), uint64(i)))
	pre := chunkyContent(uint32(round), uint32(i), 8+r.IntN(100))
	off := r.IntN(1 << 18)
	return append(pre, base[off:off+256<<10+r.IntN(256<<10)]...)
}

func rechunkCrashChild(dir string, round int) error {
	ctx := context.Background()
	m, _, err := openCrashStore(ctx, dir, -1)
	if err != nil {
		return err
	}
	say := func(s string) { os.Stdout.Write([]byte(s + "\n")) }
	say("READY")
	for i := 0; i < 1000; i++ {
		b := []string{"main", "b"}[i%2]
		fs, _, err := m.View(b)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("r%d-f%d", round, i)
		data := crashFile(round, i)
		say(fmt.Sprintf("BEGIN %s %s %s", b, name, sha(data)))
		if err := writeWhole(fs, name, data); err != nil {
			return err
		}
		if err := fs.Sync(ctx); err != nil {
			return err
		}
		say(fmt.Sprintf("ACK %s %s %s", b, name, sha(data)))
		if i%2 == 1 {
			gs, err := m.GC(ctx)
			if err != nil {
				return err
			}
			say(fmt.Sprintf("GC %d", gs.Rechunk.Extents))
		}
	}
	return m.Close()
}

// TestRechunkCrash kills a process with SIGKILL while it writes files and
// rechunks them (into chunks, then extents), and checks after each kill that every acknowledged file
// reads back whole (a chunk reference naming a deleted chunk reads EIO),
// also after a GC and a sweep.
func TestRechunkCrash(t *testing.T) {
	if os.Getenv(rechunkCrashEnv) != "" {
		t.Skip("in the child")
	}
	ctx := context.Background()
	dir := t.TempDir()
	m, st, err := openCrashStore(ctx, dir, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Fork(ctx, "main", "b"); err != nil {
		t.Fatal(err)
	}
	m.Close()
	st.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{} // "branch name" -> sha
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	gcs, extents := 0, 0
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(exe, "-test.run", "^TestRechunkCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s", rechunkCrashEnv, round, dir))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var got []string
		var timer *time.Timer
		// Kill after a random number of GCs, a random time into the next.
		killAfter := 1 + rng.IntN(3)
		for sc.Scan() {
			l := sc.Text()
			got = append(got, l)
			if f := strings.Fields(l); len(f) == 2 && f[0] == "GC" {
				gcs++
				n, _ := strconv.Atoi(f[1])
				extents += n
				if killAfter--; killAfter == 0 {
					delay := time.Duration(rng.IntN(150)) * time.Millisecond
					timer = time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
				}
			}
		}
		werr := cmd.Wait()
		if timer != nil {
			timer.Stop()
		}
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
			t.Fatalf("round %d: child was not killed: %v\n%s\nstderr:\n%s", round, werr, tail(got, 10), stderr.String())
		}
		for _, l := range got {
			if strings.HasPrefix(l, "ERR") {
				t.Fatalf("round %d: child: %s", round, l)
			}
			if f := strings.Fields(l); len(f) == 4 && f[0] == "ACK" {
				acked[f[1]+" "+f[2]] = f[3]
			}
		}
		m, st, err := openCrashStore(ctx, dir, -1)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		check := func(when string) {
			t.Helper()
			for k, want := range acked {
				f := strings.Fields(k)
				fs, _, err := m.View(f[0])
				if err != nil {
					t.Fatal(err)
				}
				p, err := readFile(fs, f[1], 1<<20)
				if err != nil || sha(p) != want {
					t.Fatalf("round %d, %s: acknowledged %s reads %d bytes (%v), not what was written", round, when, k, len(p), err)
				}
			}
		}
		check("after SIGKILL")
		if _, err := m.Reclaim(ctx); err != nil {
			t.Fatal(err)
		}
		check("after a sweep")
		m.Close()
		st.Close()
		t.Logf("round %d: killed after %d lines, %d files acknowledged", round, len(got), len(acked))
	}
	if gcs < rounds {
		t.Fatalf("the children ran %d GCs in %d rounds: the kills did not land in rechunking", gcs, rounds)
	}
	if extents == 0 {
		t.Fatal("the children's GCs wrote no extent: the kills did not land among extent swaps")
	}
}

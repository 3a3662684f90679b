package branches_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// TestConcurrentBranches runs writers, readers and lifecycle operations on
// several branches at once (run it under go test -race too):
//   - a writer per worker branch rewrites its files with numbered versions,
//     while readers of that branch check that every read is one whole
//     version, never older than one they saw before;
//   - main's writer rewrites the base files the workers forked from, while
//     readers check that the workers still see the base as it was at the
//     fork (snapshot isolation);
//   - a lifecycle goroutine forks a child of worker w0, writes in it and
//     commits it back (merging with w0's writer), aborts others, takes
//     checkpoints of w1 and forks from them, checking each checkpoint fork
//     is a consistent, frozen snapshot.
//
// At the end every branch must hold exactly the last versions, and a
// commit into main must invalidate the other workers.

const (
	raceFileSize = 3*4096 + 100 // spans block boundaries (4 KiB blocks)
	raceFiles    = 3
)

// raceContent is version v of a file: every 8 bytes hold (tag, v).
func raceContent(tag uint32, v uint32) []byte {
	p := make([]byte, raceFileSize)
	for i := 0; i+8 <= len(p); i += 8 {
		binary.BigEndian.PutUint32(p[i:], tag)
		binary.BigEndian.PutUint32(p[i+4:], v)
	}
	return p
}

// raceVersion returns the version p holds, or an error if p is not one
// whole version of tag.
func raceVersion(p []byte, tag uint32) (uint32, error) {
	if len(p) != raceFileSize {
		return 0, fmt.Errorf("size %d, want %d", len(p), raceFileSize)
	}
	v := binary.BigEndian.Uint32(p[4:])
	for i := 0; i+8 <= len(p); i += 8 {
		if t, w := binary.BigEndian.Uint32(p[i:]), binary.BigEndian.Uint32(p[i+4:]); t != tag || w != v {
			return 0, fmt.Errorf("torn read: offset %d holds (%d,%d), offset 0 (%d,%d)", i, t, w, tag, v)
		}
	}
	return v, nil
}

func readWhole(fs *cowfs.View, p string) ([]byte, error) {
	f, err := fs.Billy().Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, raceFileSize+1)
	n, err := f.(io.ReaderAt).ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return buf[:n], nil
}

func writeWhole(fs *cowfs.View, p string, data []byte) error {
	f, err := fs.Billy().OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.(io.WriterAt).WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func TestConcurrentBranches(t *testing.T) {
	ctx := context.Background()
	st, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1, MemTableSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, FS: cowfs.Options{BlockSize: 4096},
		ReclaimDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()

	writes, lifeIters := 150, 12
	if testing.Short() {
		writes, lifeIters = 30, 3
	}
	const workers = 4
	const baseTag = 1000
	mainFS, _, err := m.View("main")
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < raceFiles; k++ {
		if err := writeWhole(mainFS, fmt.Sprintf("base%d", k), raceContent(baseTag+uint32(k), 0)); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, workers)
	for i := range names {
		names[i] = fmt.Sprintf("w%d", i)
		if _, err := m.Fork(ctx, "main", names[i]); err != nil {
			t.Fatal(err)
		}
	}
	tag := func(w, k int) uint32 { return uint32(w*100 + k + 1) }

	var failures atomic.Int32
	errorf := func(format string, args ...any) {
		if failures.Add(1) <= 20 {
			t.Errorf(format, args...)
		}
	}
	var writersDone sync.WaitGroup
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// last[w][k] is the last version written to file k of worker w.
	var last [workers][raceFiles]atomic.Uint32

	// Writers of the workers.
	for w := 0; w < workers; w++ {
		writersDone.Add(1)
		go func(w int) {
			defer writersDone.Done()
			fs, _, err := m.View(names[w])
			if err != nil {
				errorf("view %s: %v", names[w], err)
				return
			}
			for v := 1; v <= writes; v++ {
				k := v % raceFiles
				if err := writeWhole(fs, fmt.Sprintf("file%d", k), raceContent(tag(w, k), uint32(v))); err != nil {
					errorf("%s: write file%d v%d: %v", names[w], k, v, err)
					return
				}
				last[w][k].Store(uint32(v))
			}
		}(w)
	}
	// main's writer rewrites the base files after the fork.
	writersDone.Add(1)
	go func() {
		defer writersDone.Done()
		for v := 1; v <= writes/2; v++ {
			k := v % raceFiles
			if err := writeWhole(mainFS, fmt.Sprintf("base%d", k), raceContent(baseTag+uint32(k), uint32(v))); err != nil {
				errorf("main: write base%d: %v", k, err)
				return
			}
		}
	}()
	// Readers: two per worker.
	for w := 0; w < workers; w++ {
		for r := 0; r < 2; r++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				fs, _, err := m.View(names[w])
				if err != nil {
					errorf("view %s: %v", names[w], err)
					return
				}
				var seen [raceFiles]uint32
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := i % raceFiles
					floor := last[w][k].Load()
					p, err := readWhole(fs, fmt.Sprintf("file%d", k))
					if floor == 0 && (errors.Is(err, os.ErrNotExist) || err == nil && len(p) == 0) {
						continue // not written yet, or created and not yet written
					}
					if err != nil {
						errorf("%s: read file%d: %v", names[w], k, err)
						return
					}
					v, err := raceVersion(p, tag(w, k))
					if err != nil {
						errorf("%s: file%d: %v", names[w], k, err)
						return
					}
					if v < floor || v < seen[k] {
						errorf("%s: file%d: read version %d after version %d was acknowledged / seen %d", names[w], k, v, floor, seen[k])
					}
					seen[k] = v
					// The base stays as it was at the fork.
					p, err = readWhole(fs, fmt.Sprintf("base%d", k))
					if err != nil {
						errorf("%s: read base%d: %v", names[w], k, err)
						return
					}
					if v, err := raceVersion(p, baseTag+uint32(k)); err != nil || v != 0 {
						errorf("%s: base%d shows version %d, %v; want 0 (snapshot isolation)", names[w], k, v, err)
					}
				}
			}(w)
		}
	}
	// Lifecycle: children of w0 committed back, checkpoints of w1.
	type cfile struct {
		name string
		tag  uint32
	}
	var committed []cfile // files committed into w0
	var lifeErr error
	writersDone.Add(1)
	go func() {
		defer writersDone.Done()
		for i := 0; i < lifeIters; i++ {
			c := fmt.Sprintf("t%d", i)
			if _, err := m.Fork(ctx, "w0", c); err != nil {
				lifeErr = fmt.Errorf("fork %s: %w", c, err)
				return
			}
			cfs, _, err := m.View(c)
			if err != nil {
				lifeErr = err
				return
			}
			name := fmt.Sprintf("from-%s", c)
			if err := writeWhole(cfs, name, raceContent(7000+uint32(i), 1)); err != nil {
				lifeErr = fmt.Errorf("write %s: %w", name, err)
				return
			}
			if i%3 == 2 {
				if _, err := m.Abort(ctx, c); err != nil {
					lifeErr = fmt.Errorf("abort %s: %w", c, err)
					return
				}
			} else {
				if _, err := m.Commit(ctx, c); err != nil {
					lifeErr = fmt.Errorf("commit %s: %w", c, err)
					return
				}
				committed = append(committed, cfile{name, 7000 + uint32(i)})
			}
			// A checkpoint of w1 and a fork of it: a frozen, whole snapshot.
			label := fmt.Sprintf("cp%d", i)
			if _, err := m.Checkpoint(ctx, "w1", label); err != nil {
				lifeErr = fmt.Errorf("checkpoint: %w", err)
				return
			}
			f := fmt.Sprintf("cpfork%d", i)
			if _, err := m.ForkCheckpoint(ctx, "w1", label, f); err != nil {
				lifeErr = fmt.Errorf("fork checkpoint: %w", err)
				return
			}
			ffs, _, err := m.View(f)
			if err != nil {
				lifeErr = err
				return
			}
			var first [raceFiles]uint32
			for pass := 0; pass < 2; pass++ {
				for k := 0; k < raceFiles; k++ {
					p, err := readWhole(ffs, fmt.Sprintf("file%d", k))
					if errors.Is(err, os.ErrNotExist) {
						first[k] = 1 << 31
						continue
					}
					if err != nil {
						lifeErr = fmt.Errorf("%s: %w", f, err)
						return
					}
					if len(p) == 0 { // created, not yet written at the checkpoint
						p = raceContent(tag(1, k), 1<<30)
					}
					v, err := raceVersion(p, tag(1, k))
					if err != nil {
						lifeErr = fmt.Errorf("%s file%d: %w", f, k, err)
						return
					}
					if pass == 0 {
						first[k] = v
					} else if first[k] != v {
						lifeErr = fmt.Errorf("%s file%d changed from version %d to %d: not frozen", f, k, first[k], v)
						return
					}
				}
				time.Sleep(time.Millisecond)
			}
			if _, err := m.Abort(ctx, f); err != nil {
				lifeErr = fmt.Errorf("abort %s: %w", f, err)
				return
			}
		}
	}()
	// Listing, info and diffs while all this runs.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := m.List(ctx); err != nil {
				errorf("list: %v", err)
				return
			}
			if in, err := m.Get(ctx, "w2"); err != nil || in.State != branches.StateLive {
				errorf("get w2: %+v %v", in, err)
				return
			}
			if _, err := m.Diff(ctx, "w2"); err != nil {
				errorf("diff: %v", err)
				return
			}
		}
	}()
	writersDone.Wait()
	close(stop)
	wg.Wait()
	if lifeErr != nil {
		t.Fatal(lifeErr)
	}
	if t.Failed() {
		return
	}
	// Final state.
	for w := 0; w < workers; w++ {
		fs, _, err := m.View(names[w])
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < raceFiles; k++ {
			p, err := readWhole(fs, fmt.Sprintf("file%d", k))
			if err != nil {
				t.Fatal(err)
			}
			if v, err := raceVersion(p, tag(w, k)); err != nil || v != last[w][k].Load() {
				t.Errorf("%s file%d: version %d, %v; want %d", names[w], k, v, err, last[w][k].Load())
			}
		}
	}
	w0, _, _ := m.View("w0")
	for _, c := range committed {
		p, err := readWhole(w0, c.name)
		if err != nil {
			t.Errorf("w0: committed %s: %v", c.name, err)
			continue
		}
		if v, err := raceVersion(p, c.tag); err != nil || v != 1 {
			t.Errorf("w0: %s: version %d, %v", c.name, v, err)
		}
	}
	for k := 0; k < raceFiles; k++ {
		p, err := readWhole(mainFS, fmt.Sprintf("base%d", k))
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(0)
		for v := 1; v <= writes/2; v++ {
			if v%raceFiles == k {
				want = uint32(v)
			}
		}
		if v, err := raceVersion(p, baseTag+uint32(k)); err != nil || v != want {
			t.Errorf("main base%d: version %d, %v; want %d", k, v, err, want)
		}
	}
	// First commit wins: committing w2 invalidates the other workers.
	res, err := m.Commit(ctx, "w2")
	if err != nil {
		t.Fatalf("commit w2: %v", err)
	}
	if fmt.Sprint(res.Invalidated) != "[w0 w1 w3]" {
		t.Errorf("commit w2 invalidated %v, want [w0 w1 w3]", res.Invalidated)
	}
	for _, n := range []string{"w0", "w1", "w3"} {
		if _, _, err := m.View(n); !errors.Is(err, branches.ErrInvalidated) {
			t.Errorf("view %s after w2's commit: %v", n, err)
		}
	}
	t.Logf("%d writes per worker, %d children committed into w0", writes, len(committed))
}

// TestGCRace runs GC (rechunking, sweeps, prunes of hidden blocks, the
// store's log rewrites) and the space accounting over and over while
// main's writer rewrites and truncates its files and a lifecycle
// goroutine forks children, writes and truncates in them, and commits
// (merging with main's writes) or aborts them (run it under go test -race
// too). Every acknowledged write reads back, during the run, at the end,
// and after a reopen.
func TestGCRace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := kv.BadgerOptions{GCInterval: -1, MemTableSize: 4 << 20, ValueLogFileSize: 1 << 20}
	st, err := kv.OpenBadger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	mopts := branches.Options{Store: st, FS: cowfs.Options{BlockSize: 4096}, ReclaimDelay: time.Millisecond, GCIdle: 5 * time.Millisecond}
	m, err := branches.Open(ctx, mopts)
	if err != nil {
		t.Fatal(err)
	}
	// Both keep going until minGCs GCs ran alongside them.
	rounds, mainOps, minGCs := 24, 120, int32(4)
	if testing.Short() {
		rounds, mainOps, minGCs = 6, 30, 2
	}
	// content is version v of file name: a block every file shares (so
	// content stays referenced across versions and files), then bytes of
	// its own, n bytes in all.
	content := func(name string, v, n int) []byte {
		p := make([]byte, n)
		x := uint64(len(name)*7919+v)*0x9e3779b97f4a7c15 + uint64(name[len(name)-1])
		for i := range p {
			if i < 4096 {
				p[i] = byte(i * 13)
				continue
			}
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			p[i] = byte(x)
		}
		return p
	}
	// put makes file name of view v hold exactly data.
	put := func(v *cowfs.View, name string, data []byte) error {
		a, err := v.Create(cowfs.RootIno, name, cowfs.CreateUnchecked, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			return err
		}
		if _, err := v.WriteAt(a.Ino, data, 0); err != nil {
			return err
		}
		size := uint64(len(data))
		_, err = v.SetAttr(a.Ino, cowfs.SetAttr{Size: &size})
		return err
	}
	get := func(v *cowfs.View, name string) ([]byte, error) {
		a, err := v.Lookup(cowfs.RootIno, name)
		if err != nil {
			return nil, err
		}
		p := make([]byte, a.Size+1)
		n, _, err := v.ReadAt(a.Ino, p, 0)
		return p[:n], err
	}

	var failures atomic.Int32
	errorf := func(format string, args ...any) {
		if failures.Add(1) <= 20 {
			t.Errorf(format, args...)
		}
	}
	var mu sync.Mutex // protects want
	want := map[string][]byte{}
	stop := make(chan struct{})
	var gcs, spaces, ops atomic.Int32
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { // GC and the space accounting, back to back
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := m.GC(ctx); err != nil {
				errorf("gc: %v", err)
				return
			}
			gcs.Add(1)
			if _, err := m.Space(ctx); err != nil {
				errorf("space: %v", err)
				return
			}
			if _, err := m.UniqueBytes(ctx); err != nil {
				errorf("unique bytes: %v", err)
				return
			}
			spaces.Add(1)
		}
	}()
	var work sync.WaitGroup
	work.Add(2)
	go func() { // main's writer: rewrites, truncates, grows
		defer work.Done()
		v, _, err := m.View("main")
		if err != nil {
			errorf("view main: %v", err)
			return
		}
		for i := 0; (i < mainOps || gcs.Load() < minGCs) && failures.Load() == 0; i++ {
			name := fmt.Sprintf("m%d", i%4)
			var data []byte
			switch i % 3 {
			case 0, 1:
				data = content(name, i, 3*4096+i*37%5000)
			case 2: // truncate what it holds to an unaligned size
				mu.Lock()
				old := want[name]
				mu.Unlock()
				data = old[:len(old)*2/3]
			}
			if err := put(v, name, data); err != nil {
				errorf("main: put %s: %v", name, err)
				return
			}
			mu.Lock()
			want[name] = data
			mu.Unlock()
			ops.Add(1)
			if got, err := get(v, name); err != nil || !bytes.Equal(got, data) {
				errorf("main: %s reads back %d bytes (%v), want the %d just written", name, len(got), err, len(data))
				return
			}
		}
	}()
	go func() { // forks, writes and truncates in them, commits and aborts
		defer work.Done()
		for i := 0; (i < rounds || gcs.Load() < minGCs) && failures.Load() == 0; i++ {
			c := fmt.Sprintf("c%d", i)
			ops.Add(1)
			if _, err := m.Fork(ctx, "main", c); err != nil {
				errorf("fork %s: %v", c, err)
				return
			}
			v, _, err := m.View(c)
			if err != nil {
				errorf("view %s: %v", c, err)
				return
			}
			name := fmt.Sprintf("f%d", i%3)
			data := content(name, 1000+i, 5*4096+i*101)
			if i%4 == 3 {
				data = data[:4096+50] // a truncate in the branch
			}
			if err := put(v, name, content(name, 2000+i, 8*4096)); err != nil {
				errorf("%s: put %s: %v", c, name, err)
				return
			}
			if err := put(v, name, data); err != nil {
				errorf("%s: put %s: %v", c, name, err)
				return
			}
			if i%3 == 2 {
				if _, err := m.Abort(ctx, c); err != nil {
					errorf("abort %s: %v", c, err)
					return
				}
				continue
			}
			if _, err := m.Commit(ctx, c); err != nil {
				errorf("commit %s: %v", c, err)
				return
			}
			mu.Lock()
			want[name] = data
			mu.Unlock()
			mv, _, err := m.View("main")
			if err != nil {
				errorf("view main: %v", err)
				return
			}
			if got, err := get(mv, name); err != nil || !bytes.Equal(got, data) {
				errorf("main after committing %s: %s reads back %d bytes (%v), want %d", c, name, len(got), err, len(data))
				return
			}
		}
	}()
	work.Wait()
	close(stop)
	bg.Wait()
	check := func(when string) {
		mv, _, err := m.View("main")
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range want {
			if got, err := get(mv, name); err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s: main's %s reads %d bytes (%v), want %d", when, name, len(got), err, len(data))
			}
		}
	}
	check("after the run")
	if _, err := m.GC(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a last GC")
	m.Close()
	st.Close()
	if st, err = kv.OpenBadger(dir, opts); err != nil {
		t.Fatal(err)
	}
	mopts.Store = st
	if m, err = branches.Open(ctx, mopts); err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); st.Close() }()
	check("after a reopen")
	t.Logf("%d GCs and %d space reports ran alongside %d rounds and writes of main", gcs.Load(), spaces.Load(), ops.Load())
}

// Package branchops measures branch operations (fork, commit, abort)
// in-process on a real Badger store, and the storage growth workloads EDIT16
// and Prepend (16 scattered 10-byte edits, and a 10-byte prepend, of a
// 32 MiB file), PrependKept (the prepend left uncommitted in a branch, so
// that both versions stay reachable), CHURN and ABORTCHURN (rounds of
// rewrites committed, and of new files aborted, then left to the
// background reclaimer).
package branchops

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/branchnfs/branchnfs/bench/stats"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Store is an open store with its branch manager.
type Store struct {
	Dir string
	KV  kv.Store
	M   *branches.Manager
}

// Open opens (creating) a store in dir with default options.
func Open(ctx context.Context, dir string) (*Store, error) {
	s, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		return nil, err
	}
	m, err := branches.Open(ctx, branches.Options{Store: s})
	if err != nil {
		s.Close()
		return nil, err
	}
	return &Store{Dir: dir, KV: s, M: m}, nil
}

// Close closes the manager and the store.
func (s *Store) Close() error {
	err := s.M.Close()
	if err2 := s.KV.Close(); err == nil {
		err = err2
	}
	return err
}

// WriteFile creates dir/name in branch (dir an inode of that branch) and
// writes data in 1 MiB pieces.
func WriteFile(m *branches.Manager, branch string, dir cowfs.InodeID, name string, data []byte) (cowfs.InodeID, error) {
	v, _, err := m.View(branch)
	if err != nil {
		return 0, err
	}
	a, err := v.Create(dir, name, cowfs.CreateUnchecked, cowfs.NewAttr{Mode: 0o644}, 0)
	if err != nil {
		return 0, err
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := v.WriteAt(a.Ino, data[off:min(off+1<<20, len(data))], int64(off)); err != nil {
			return 0, err
		}
	}
	return a.Ino, nil
}

// Populate fills branch main with n files of size bytes, 1,000 per
// directory.
func Populate(m *branches.Manager, n, size int) error {
	v, _, err := m.View("main")
	if err != nil {
		return err
	}
	content := make([]byte, size)
	var dir cowfs.InodeID
	for i := 0; i < n; i++ {
		if i%1000 == 0 {
			a, err := v.Mkdir(cowfs.RootIno, fmt.Sprintf("d%04d", i/1000), cowfs.NewAttr{Mode: 0o755})
			if err != nil {
				return err
			}
			dir = a.Ino
		}
		content[0], content[1], content[2] = byte(i), byte(i>>8), byte(i>>16)
		a, err := v.Create(dir, fmt.Sprintf("f%06d", i), cowfs.CreateUnchecked, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			return err
		}
		if _, err := v.WriteAt(a.Ino, content, 0); err != nil {
			return err
		}
	}
	return nil
}

// OpsResult holds latency summaries in microseconds.
type OpsResult struct {
	BaseFiles int                      `json:"base_files"`
	Fork      stats.Summary            `json:"fork_us"`
	Abort     stats.Summary            `json:"abort_us"`
	Commit    map[string]stats.Summary `json:"commit_us"` // by changed size label
	// CommitSynced is the same commit when the branch's data was made
	// durable (kv Sync) before the timer started: what the commit costs
	// beyond flushing the data it makes durable.
	CommitSynced map[string]stats.Summary `json:"commit_presynced_us"`
	PopulateS    float64                  `json:"populate_seconds"`
}

// CommitSizes are the changed-data sizes of the commit benchmark.
var CommitSizes = []struct {
	Label string
	Bytes int
}{{"1KB", 1000}, {"100KB", 100 * 1000}, {"1MB", 1000 * 1000}, {"100MB", 100 * 1000 * 1000}}

// Ops measures, on a fresh store in dir holding baseFiles files in main:
// forks of main (n of them, then each aborted, timing both), and commits of
// a fresh child into an unchanged main after writing each of sizes (runs
// commits per size, fewer for 100MB: bigRuns).
func Ops(ctx context.Context, dir string, baseFiles, n, runs, bigRuns int, maxCommit int) (OpsResult, error) {
	res := OpsResult{BaseFiles: baseFiles, Commit: map[string]stats.Summary{}, CommitSynced: map[string]stats.Summary{}}
	s, err := Open(ctx, dir)
	if err != nil {
		return res, err
	}
	defer s.Close()
	t0 := time.Now()
	if err := Populate(s.M, baseFiles, 100); err != nil {
		return res, fmt.Errorf("populate: %w", err)
	}
	res.PopulateS = time.Since(t0).Seconds()
	forks := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		if _, err := s.M.Fork(ctx, "main", fmt.Sprintf("fork%d", i)); err != nil {
			return res, fmt.Errorf("fork: %w", err)
		}
		forks = append(forks, time.Since(t))
	}
	aborts := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		if _, err := s.M.Abort(ctx, fmt.Sprintf("fork%d", i)); err != nil {
			return res, fmt.Errorf("abort: %w", err)
		}
		aborts = append(aborts, time.Since(t))
	}
	res.Fork, res.Abort = stats.Summarize(stats.Micros(forks)), stats.Summarize(stats.Micros(aborts))
	for _, cs := range CommitSizes {
		if cs.Bytes > maxCommit {
			continue
		}
		r := runs
		if cs.Bytes >= 100e6 {
			r = bigRuns
		}
		data := make([]byte, cs.Bytes)
		for i := range data {
			data[i] = byte(i * 7)
		}
		var ds, dsSynced []time.Duration
		for i := 0; i < 2*r; i++ {
			presync := i%2 == 1
			name := fmt.Sprintf("c%s-%d", cs.Label, i)
			if _, err := s.M.Fork(ctx, "main", name); err != nil {
				return res, err
			}
			if _, err := WriteFile(s.M, name, cowfs.RootIno, name+".bin", data); err != nil {
				return res, fmt.Errorf("write into %s: %w", name, err)
			}
			if presync {
				if err := s.KV.Sync(ctx); err != nil {
					return res, err
				}
			}
			t := time.Now()
			cr, err := s.M.Commit(ctx, name)
			if err != nil {
				return res, fmt.Errorf("commit %s: %w", name, err)
			}
			if presync {
				dsSynced = append(dsSynced, time.Since(t))
			} else {
				ds = append(ds, time.Since(t))
			}
			if !cr.FastPath {
				return res, fmt.Errorf("commit %s into an unchanged parent did not take the fast path", name)
			}
		}
		res.Commit[cs.Label] = stats.Summarize(stats.Micros(ds))
		res.CommitSynced[cs.Label] = stats.Summarize(stats.Micros(dsSynced))
	}
	return res, nil
}

// DirSize is the disk space under dir: allocated blocks, as du counts them.
func DirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += blocks(fi)
		}
		return nil
	})
	return total, err
}

// GrowthResult is one storage growth measurement.
type GrowthResult struct {
	Workload    string  `json:"workload"`
	BaseBytes   int64   `json:"base_bytes"`  // store after the 32 MiB file, compacted and synced
	AfterBytes  int64   `json:"after_bytes"` // store after the workload, compacted and synced
	AddedBytes  int64   `json:"added_bytes"`
	AddedMiB    float64 `json:"added_mib"`
	KVSizeBase  int64   `json:"kv_size_base"` // kv.Store.Size (Badger's own estimate)
	KVSizeAfter int64   `json:"kv_size_after"`
	LiveBytes   int64   `json:"live_bytes"` // big.bin's size at the end
	// IdleSeconds: the churn workloads are measured after this long idle
	// with the store open, instead of after an explicit GC.
	IdleSeconds float64 `json:"idle_seconds,omitempty"`
}

const fileSize = 32 << 20

// settle runs the branch store's own compaction (reclaim garbage layers,
// fold deep stacks, then GC: reclaim again, prune shadowed blocks, give the
// space back), syncs and closes the store, and returns its size on disk
// and Badger's own estimate.
func settle(ctx context.Context, s *Store) (int64, int64, error) {
	if _, err := s.M.Reclaim(ctx); err != nil {
		return 0, 0, err
	}
	if _, err := s.M.Fold(ctx); err != nil {
		return 0, 0, err
	}
	if _, err := s.M.GC(ctx); err != nil {
		return 0, 0, err
	}
	if err := s.KV.Sync(ctx); err != nil {
		return 0, 0, err
	}
	kvs, _ := s.KV.Size()
	if err := s.Close(); err != nil {
		return 0, 0, err
	}
	du, err := DirSize(s.Dir)
	return du, kvs, err
}

// Growth runs workload ("EDIT16", "Prepend", "PrependKept", "CHURN" or
// "ABORTCHURN") on a fresh store in dir that holds one 32 MiB file of
// pseudo-random bytes (data) in main, and checks main's big.bin by hash
// afterwards.
func Growth(ctx context.Context, dir, workload string, data []byte) (GrowthResult, error) {
	res := GrowthResult{Workload: workload}
	s, err := Open(ctx, dir)
	if err != nil {
		return res, err
	}
	if _, err := WriteFile(s.M, "main", cowfs.RootIno, "big.bin", data); err != nil {
		s.Close()
		return res, err
	}
	if res.BaseBytes, res.KVSizeBase, err = settle(ctx, s); err != nil {
		return res, err
	}
	if s, err = Open(ctx, dir); err != nil {
		return res, err
	}
	var want []byte // what big.bin holds afterwards
	switch workload {
	case "EDIT16":
		err = edit16(ctx, s.M)
		want = edit16Content(data)
	case "Prepend":
		err = prepend(ctx, s.M, data)
		want = append([]byte("PREPEND010"), data...)
	case "PrependKept":
		err = prependKept(ctx, s.M, data)
		want = data // main's; the branch keeps the prepended version
	case "CHURN", "ABORTCHURN":
		want, err = churn(ctx, s.M, workload == "ABORTCHURN", data)
	default:
		err = fmt.Errorf("unknown workload %q", workload)
	}
	if err != nil {
		s.Close()
		return res, fmt.Errorf("%s: %w", workload, err)
	}
	settleAfter := settle
	if isChurn(workload) {
		settleAfter, res.IdleSeconds = settleIdle, ChurnIdle.Seconds()
	}
	if res.AfterBytes, res.KVSizeAfter, err = settleAfter(ctx, s); err != nil {
		return res, err
	}
	if err := verifyFile(ctx, dir, workload, want); err != nil {
		return res, err
	}
	res.LiveBytes = int64(len(want))
	res.AddedBytes = res.AfterBytes - res.BaseBytes
	res.AddedMiB = float64(res.AddedBytes) / (1 << 20)
	return res, nil
}

// edit16: 16 rounds of fork, a 10-byte marker at ((i+1)*2654435761) mod
// (2^25-10), commit.
func edit16(ctx context.Context, m *branches.Manager) error {
	for i := 0; i < 16; i++ {
		name := fmt.Sprintf("edit%d", i)
		if _, err := m.Fork(ctx, "main", name); err != nil {
			return err
		}
		v, _, err := m.View(name)
		if err != nil {
			return err
		}
		a, err := v.Lookup(cowfs.RootIno, "big.bin")
		if err != nil {
			return err
		}
		off := int64((uint64(i+1) * 2654435761) % (1<<25 - 10))
		if _, err := v.WriteAt(a.Ino, []byte(fmt.Sprintf("MARKER%04d", i)), off); err != nil {
			return err
		}
		if _, err := m.Commit(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// prepend: fork, write "PREPEND010" then the whole original into a new
// file, rename it over the original, commit.
func prepend(ctx context.Context, m *branches.Manager, data []byte) error {
	if _, err := m.Fork(ctx, "main", "prepend"); err != nil {
		return err
	}
	buf := append([]byte("PREPEND010"), data...)
	if _, err := WriteFile(m, "prepend", cowfs.RootIno, "big.bin.new", buf); err != nil {
		return err
	}
	v, _, err := m.View("prepend")
	if err != nil {
		return err
	}
	if err := v.Rename(cowfs.RootIno, "big.bin.new", cowfs.RootIno, "big.bin"); err != nil {
		return err
	}
	_, err = m.Commit(ctx, "prepend")
	return err
}

// prependKept is prepend without the commit: the branch holds the
// prepended copy, main the original, so both stay reachable.
func prependKept(ctx context.Context, m *branches.Manager, data []byte) error {
	if _, err := m.Fork(ctx, "main", "kept"); err != nil {
		return err
	}
	buf := append([]byte("PREPEND010"), data...)
	if _, err := WriteFile(m, "kept", cowfs.RootIno, "big.bin.new", buf); err != nil {
		return err
	}
	v, _, err := m.View("kept")
	if err != nil {
		return err
	}
	return v.Rename(cowfs.RootIno, "big.bin.new", cowfs.RootIno, "big.bin")
}

// Available reports whether the branches package is implemented (the
// skeleton panics "todo").
func Available(ctx context.Context) (ok bool, why string) {
	dir, err := os.MkdirTemp("", "branchops-probe")
	if err != nil {
		return false, err.Error()
	}
	defer os.RemoveAll(dir)
	defer func() {
		if r := recover(); r != nil {
			ok, why = false, fmt.Sprint("branches panics: ", r)
		}
	}()
	s, err := Open(ctx, dir)
	if err != nil {
		return false, err.Error()
	}
	s.Close()
	return true, ""
}

// DirectResult is a sequential write and read of one file straight through
// a cowfs view (no NFS), to separate the store's cost from the server's.
type DirectResult struct {
	WriteMiBps float64 `json:"write_mibps"` // 1 MiB WriteAt calls, then Sync
	ReadMiBps  float64 `json:"read_mibps"`  // 1 MiB ReadAt calls
}

// Direct writes data to a new file in main of a fresh store in dir, syncs,
// and reads it back, checking the bytes.
func Direct(ctx context.Context, dir string, data []byte) (DirectResult, error) {
	var res DirectResult
	s, err := Open(ctx, dir)
	if err != nil {
		return res, err
	}
	defer s.Close()
	t := time.Now()
	ino, err := WriteFile(s.M, "main", cowfs.RootIno, "seq.bin", data)
	if err != nil {
		return res, err
	}
	if err := s.KV.Sync(ctx); err != nil {
		return res, err
	}
	mib := float64(len(data)) / (1 << 20)
	res.WriteMiBps = mib / time.Since(t).Seconds()
	v, _, err := s.M.View("main")
	if err != nil {
		return res, err
	}
	buf := make([]byte, 1<<20)
	t = time.Now()
	for off := 0; off < len(data); {
		n, _, err := v.ReadAt(ino, buf, int64(off))
		if err != nil {
			return res, err
		}
		if n == 0 || string(buf[:n]) != string(data[off:off+n]) {
			return res, fmt.Errorf("read back differs at %d", off)
		}
		off += n
	}
	res.ReadMiBps = mib / time.Since(t).Seconds()
	return res, nil
}

// GCResult is one measurement of the disk space given back by
// branches.Manager.GC after a workload of rounds.
type GCResult struct {
	Workload         string  `json:"workload"`
	Rounds           int     `json:"rounds"`
	ValueLogFileSize int64   `json:"value_log_file_size"`
	LiveBytes        int64   `json:"live_bytes"`  // file data main holds at the end
	ImportDisk       int64   `json:"import_disk"` // store after the first file, before the rounds
	BeforeGC         int64   `json:"before_gc"`   // store after the rounds
	AfterGC          int64   `json:"after_gc"`    // store after GC, the writer stopped
	Growth           int64   `json:"growth"`      // AfterGC - ImportDisk
	Ratio            float64 `json:"ratio"`       // AfterGC / LiveBytes
	GCSeconds        float64 `json:"gc_seconds"`
	Rewrites         int     `json:"log_rewrites"`
	Pruned           int     `json:"pruned_refs"`
	// WriteMaxMs is the slowest of the small writes to another branch
	// that ran during GC, WriteP99Ms their 99th percentile.
	WriteMaxMs float64 `json:"write_max_ms"`
	WriteP99Ms float64 `json:"write_p99_ms"`
	Writes     int     `json:"writes_during_gc"`
}

// GCWorkload runs rounds of fork of main, then ("abort") a new file of
// size bytes written and the fork aborted, or ("commit") file big.bin
// rewritten whole and the fork committed, on a fresh store in dir whose
// main holds big.bin (size bytes) from the start; then GC, while a writer
// rewrites a 4 KiB file in another branch to time writes during it.
//
// vlogSize is the store's value-log file size (0: the default).
func GCWorkload(ctx context.Context, dir, workload string, rounds, size int, vlogSize int64) (GCResult, error) {
	res := GCResult{Workload: workload, Rounds: rounds, ValueLogFileSize: vlogSize}
	kvs, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1, ValueLogFileSize: vlogSize})
	if err != nil {
		return res, err
	}
	m, err := branches.Open(ctx, branches.Options{Store: kvs, GCAfterSwept: -1})
	if err != nil {
		kvs.Close()
		return res, err
	}
	s := &Store{Dir: dir, KV: kvs, M: m}
	defer s.Close()
	gen := func(seed int) []byte {
		p := make([]byte, size)
		x := uint64(seed)*0x9e3779b97f4a7c15 + 1
		for i := 0; i+8 <= len(p); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(p[i:], x)
		}
		return p
	}
	if _, err := WriteFile(s.M, "main", cowfs.RootIno, "big.bin", gen(0)); err != nil {
		return res, err
	}
	if err := s.KV.Sync(ctx); err != nil {
		return res, err
	}
	if res.ImportDisk, err = kv.DiskUsage(dir); err != nil {
		return res, err
	}
	for i := 1; i <= rounds; i++ {
		name := fmt.Sprintf("r%d", i)
		if _, err := s.M.Fork(ctx, "main", name); err != nil {
			return res, err
		}
		switch workload {
		case "abort":
			if _, err := WriteFile(s.M, name, cowfs.RootIno, "new.bin", gen(i)); err != nil {
				return res, err
			}
			if _, err := s.M.Abort(ctx, name); err != nil {
				return res, err
			}
		case "commit":
			if _, err := WriteFile(s.M, name, cowfs.RootIno, "big.bin", gen(i)); err != nil {
				return res, err
			}
			if _, err := s.M.Commit(ctx, name); err != nil {
				return res, err
			}
		default:
			return res, fmt.Errorf("unknown workload %q", workload)
		}
	}
	res.LiveBytes = int64(size)
	if err := s.KV.Sync(ctx); err != nil {
		return res, err
	}
	if res.BeforeGC, err = kv.DiskUsage(dir); err != nil {
		return res, err
	}
	// A writer in another branch times its writes while GC runs.
	if _, err := s.M.Fork(ctx, "main", "writer"); err != nil {
		return res, err
	}
	wv, _, err := s.M.View("writer")
	if err != nil {
		return res, err
	}
	wa, err := wv.Create(cowfs.RootIno, "small", cowfs.CreateUnchecked, cowfs.NewAttr{Mode: 0o644}, 0)
	if err != nil {
		return res, err
	}
	stop := make(chan struct{})
	lat := make(chan []time.Duration, 1)
	go func() {
		var ds []time.Duration
		buf := make([]byte, 4096)
		for i := 0; ; i++ {
			select {
			case <-stop:
				lat <- ds
				return
			default:
			}
			buf[0] = byte(i)
			t := time.Now()
			if _, err := wv.WriteAt(wa.Ino, buf, 0); err != nil {
				lat <- ds
				return
			}
			ds = append(ds, time.Since(t))
			time.Sleep(time.Millisecond)
		}
	}()
	t := time.Now()
	st, err := s.M.GC(ctx)
	res.GCSeconds = time.Since(t).Seconds()
	close(stop)
	ds := <-lat
	if err != nil {
		return res, err
	}
	if _, err := s.M.Abort(ctx, "writer"); err != nil {
		return res, err
	}
	res.Writes = len(ds)
	if len(ds) > 0 {
		sum := stats.Summarize(stats.Micros(ds))
		res.WriteMaxMs, res.WriteP99Ms = sum.Max/1000, sum.P99/1000
	}
	res.Rewrites, res.Pruned = st.Rewrites, st.Pruned
	// Measured again now that the writer has stopped: Badger deletes a
	// value log that GC rewrote only once no iterator is open, so a
	// write running at that moment (the writer's) keeps the old log on
	// disk until it ends, and GC's own DiskAfter would count it.
	if res.AfterGC, err = kv.DiskUsage(dir); err != nil {
		return res, err
	}
	res.Growth = res.AfterGC - res.ImportDisk
	res.Ratio = float64(res.AfterGC) / float64(res.LiveBytes)
	// Every byte main holds must still read back.
	v, _, err := s.M.View("main")
	if err != nil {
		return res, err
	}
	a, err := v.Lookup(cowfs.RootIno, "big.bin")
	if err != nil {
		return res, err
	}
	want := gen(0)
	if workload == "commit" {
		want = gen(rounds)
	}
	got := make([]byte, size+1)
	n, _, err := v.ReadAt(a.Ino, got, 0)
	if err != nil {
		return res, fmt.Errorf("read big.bin after GC: %w", err)
	}
	if !bytes.Equal(got[:n], want) {
		return res, fmt.Errorf("big.bin reads other bytes after GC")
	}
	return res, nil
}

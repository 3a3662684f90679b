package branchops

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/branchnfs/branchnfs/bench/workload"
)

func TestOps(t *testing.T) {
	r, err := Ops(context.Background(), t.TempDir(), 30, 4, 3, 1, 1e6)
	if err != nil {
		t.Fatal(err)
	}
	if r.Fork.N != 4 || r.Abort.N != 4 || r.Fork.Median <= 0 {
		t.Fatalf("fork/abort = %+v / %+v", r.Fork, r.Abort)
	}
	for _, l := range []string{"1KB", "100KB", "1MB"} {
		if r.Commit[l].N != 3 || r.CommitSynced[l].N != 3 {
			t.Fatalf("commit %s: %+v / %+v", l, r.Commit[l], r.CommitSynced[l])
		}
	}
	if _, ok := r.Commit["100MB"]; ok {
		t.Fatal("100MB commit ran although maxCommit is 1e6")
	}
}

func TestGrowthEdit16(t *testing.T) {
	data := workload.Data(5, fileSize)
	r, err := Growth(context.Background(), t.TempDir(), "EDIT16", data)
	if err != nil {
		t.Fatal(err)
	}
	if r.BaseBytes < fileSize {
		t.Fatalf("store holding a %d-byte file measures %d bytes", fileSize, r.BaseBytes)
	}
	if r.AddedBytes != r.AfterBytes-r.BaseBytes {
		t.Fatalf("added %d != after %d - base %d", r.AddedBytes, r.AfterBytes, r.BaseBytes)
	}
	if _, err := Growth(context.Background(), t.TempDir(), "bogus", data); err == nil {
		t.Fatal("unknown workload accepted")
	}
}

// TestGrowthPrependKept: a copy of the 32 MiB file with 10 bytes
// prepended, kept in a branch beside the original, is stored once: after
// the settle step's GC rechunks both, it adds well under 1 MiB (a second
// copy would add 32).
func TestGrowthPrependKept(t *testing.T) {
	data := workload.Data(6, fileSize)
	r, err := Growth(context.Background(), t.TempDir(), "PrependKept", data)
	if err != nil {
		t.Fatal(err)
	}
	if r.AddedMiB > 1 {
		t.Fatalf("PrependKept added %.2f MiB, want < 1 MiB (the shifted copy shares the original's chunks)", r.AddedMiB)
	}
}

func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "f"), make([]byte, 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := DirSize(dir)
	if err != nil || n < 100000 {
		t.Fatalf("DirSize = %d, %v; want at least 100000", n, err)
	}
}

func TestGCWorkload(t *testing.T) {
	for _, w := range []string{"abort", "commit"} {
		r, err := GCWorkload(context.Background(), t.TempDir(), w, 4, 4<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.BeforeGC < 4*4<<20 || r.AfterGC <= 0 || r.AfterGC >= r.BeforeGC || r.Writes == 0 {
			t.Fatalf("%s: %+v", w, r)
		}
	}
	if _, err := GCWorkload(context.Background(), t.TempDir(), "bogus", 1, 1<<20, 0); err == nil {
		t.Fatal("unknown workload accepted")
	}
}

// BenchmarkGC measures the disk space GC gives back after 10 rounds of
// fork, 32 MiB written, abort (or rewrite and commit), for several
// value-log file sizes (go test -bench GC -benchtime 1x ./bench/branchops/).
func BenchmarkGC(b *testing.B) {
	for _, vlog := range []int64{16 << 20, 32 << 20, 64 << 20, 256 << 20} {
		for _, w := range []string{"abort", "commit"} {
			b.Run(fmt.Sprintf("%s/vlog=%dMiB", w, vlog>>20), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					r, err := GCWorkload(context.Background(), b.TempDir(), w, 10, 32<<20, vlog)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(r.ImportDisk)/(1<<20), "import-MiB")
					b.ReportMetric(float64(r.BeforeGC)/(1<<20), "before-MiB")
					b.ReportMetric(float64(r.AfterGC)/(1<<20), "after-MiB")
					b.ReportMetric(float64(r.Growth)/(1<<20), "growth-MiB")
					b.ReportMetric(r.Ratio, "after/live")
					b.ReportMetric(r.GCSeconds, "gc-s")
					b.ReportMetric(r.WriteP99Ms, "write-p99-ms")
					b.ReportMetric(r.WriteMaxMs, "write-max-ms")
				}
			})
		}
	}
}

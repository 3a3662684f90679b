package branchops

import (
	"context"
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

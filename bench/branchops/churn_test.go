package branchops

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/bench/workload"
)

// TestGrowthChurn runs the churn workloads briefly (what the store gives
// back needs the full idle period: scripts/bench measures it) and checks
// that the content check catches a wrong file.
func TestGrowthChurn(t *testing.T) {
	defer func(r int, d time.Duration) { ChurnRounds, ChurnIdle = r, d }(ChurnRounds, ChurnIdle)
	ChurnRounds, ChurnIdle = 2, 10*time.Millisecond
	ctx := context.Background()
	data := workload.Data(6, fileSize)
	for _, w := range []string{"CHURN", "ABORTCHURN"} {
		r, err := Growth(ctx, t.TempDir(), w, data)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		if r.LiveBytes != fileSize || r.IdleSeconds != ChurnIdle.Seconds() || r.AfterBytes < fileSize {
			t.Fatalf("%s: %+v", w, r)
		}
	}
	dir := t.TempDir()
	if _, err := Growth(ctx, dir, "Prepend", data); err != nil {
		t.Fatal(err)
	}
	if err := verifyFile(ctx, dir, "Prepend", data); err == nil || !strings.Contains(err.Error(), "hashes") {
		t.Fatalf("the original content passed the check after Prepend: %v", err)
	}
	if err := verifyFile(ctx, dir, "X", nil); err == nil {
		t.Fatal("a workload without expected content passed the check")
	}
}

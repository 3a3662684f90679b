package main

import (
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/bench/branchops"
)

// TestRenderChurn: CHURN is judged against 1.5 × the live data and
// ABORTCHURN against 5 MiB added.
func TestRenderChurn(t *testing.T) {
	r := &Results{Storage: []branchops.GrowthResult{
		{Workload: "CHURN", BaseBytes: 33 << 20, AfterBytes: 60 << 20, AddedBytes: 27 << 20, AddedMiB: 27, LiveBytes: 32 << 20, IdleSeconds: 20},
		{Workload: "ABORTCHURN", BaseBytes: 33 << 20, AfterBytes: 34 << 20, AddedBytes: 1 << 20, AddedMiB: 1, LiveBytes: 32 << 20, IdleSeconds: 20},
	}}
	md := renderMarkdown(r)
	for _, want := range []string{"| CHURN (idle 20 s, no explicit GC) |", "store ≤ 1.5 × live data (48 MiB): 1.875 × | - | **missed** |",
		"| ABORTCHURN (idle 20 s, no explicit GC) |", "| ≤ 5 MiB | - | met |"} {
		if !strings.Contains(md, want) {
			t.Errorf("storage table lacks %q:\n%s", want, md)
		}
	}
	i := strings.Index(md, "## Targets missed")
	if i < 0 || !strings.Contains(md[i:], "storage CHURN: store 60.0 MiB") || strings.Contains(md[i:], "ABORTCHURN") {
		t.Errorf("missed targets should name CHURN only:\n%s", md)
	}
}

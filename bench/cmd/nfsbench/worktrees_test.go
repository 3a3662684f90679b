package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/bench/stats"
)

// renderWorktrees lists a workspace figure under 100× as a missed target.
func TestRenderWorktrees(t *testing.T) {
	for _, c := range []struct {
		name         string
		speed, disk  float64
		wantMissed   int
		wantInOutput string
	}{
		{"both-met", 20000, 30000, 0, "20000× faster (target ≥ 100×): met"},
		{"speed-missed", 50, 30000, 1, "fork only 50× faster"},
		{"both-missed", 50, 10, 2, "fork only 10× less disk"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &worktreeResult{Workspaces: 8, WorktreeTime: stats.Summary{Median: 9000}, Fork: stats.Summary{Median: 400},
				SpeedRatio: c.speed, DiskRatio: c.disk}
			var b strings.Builder
			var missed []string
			renderWorktrees(w, func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, &missed)
			out := b.String() + strings.Join(missed, "\n")
			if len(missed) != c.wantMissed || !strings.Contains(out, c.wantInOutput) {
				t.Fatalf("missed %q\n%s", missed, out)
			}
		})
	}
}

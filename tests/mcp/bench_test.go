package mcpe2e

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// reportP50 reports the median of ds as a metric.
func reportP50(b *testing.B, ds []time.Duration) {
	sort.Slice(ds, func(i, k int) bool { return ds[i] < ds[k] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkRoundTrip measures a tool call's round trip through `branchnfs
// mcp` (one session, talking to a running server) against the CLI doing
// the same (one process per command, through the same server's API): a
// fork, a read of a 4 KiB file (MCP only: the CLI reads through a mount),
// and a diff of 10 changes.
func BenchmarkRoundTrip(b *testing.B) {
	store, _ := newStore(b)
	testbin.StartServer(b, bin, store, testbin.ServerOptions{User: regular})
	cs := session(b, store, nil)
	call(b, cs, "fork", map[string]any{"parent": "main", "name": "bench"}, nil)
	for i := 0; i < 9; i++ {
		call(b, cs, "file_write", map[string]any{"branch": "bench", "path": fmt.Sprintf("f%d.txt", i), "content": "x"}, nil)
	}
	call(b, cs, "file_write", map[string]any{"branch": "bench", "path": "4k.txt", "content": strings.Repeat("y", 4096)}, nil)
	n := 0
	run := func(name string, op func()) {
		b.Run(name, func(b *testing.B) {
			ds := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				op()
				ds = append(ds, time.Since(t0))
			}
			reportP50(b, ds)
		})
	}
	tool := func(name string, args func() map[string]any) func() {
		return func() {
			res := callRaw(b, cs, name, args())
			if res.IsError {
				b.Fatalf("%s: %s", name, text(res))
			}
		}
	}
	cli := func(args func() []string) func() {
		return func() {
			cmd := exec.Command(bin, append(args(), "--store", store)...)
			regular.Apply(cmd)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s: %v: %s", cmd, err, out)
			}
		}
	}
	run("mcp/fork", tool("fork", func() map[string]any {
		n++
		return map[string]any{"parent": "main", "name": fmt.Sprintf("m%d", n)}
	}))
	run("cli/fork", cli(func() []string { n++; return []string{"fork", "main", fmt.Sprintf("c%d", n)} }))
	run("mcp/file_read_4k", tool("file_read", func() map[string]any { return map[string]any{"branch": "bench", "path": "4k.txt"} }))
	run("mcp/diff_10", tool("diff", func() map[string]any { return map[string]any{"branch": "bench"} }))
	run("cli/diff_10", cli(func() []string { return []string{"diff", "bench", "--json"} }))
}

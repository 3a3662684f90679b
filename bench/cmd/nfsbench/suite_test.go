package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/bench/branchops"
	"github.com/branchnfs/branchnfs/bench/stats"
)

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkFork/files=100-2         	      20	     55000 ns/op	        37.00 p50-µs	       289.0 p99-µs
BenchmarkFork/files=100-2         	      20	     65000 ns/op	        41.00 p50-µs	       300.0 p99-µs
BenchmarkAbort-2                  	      20	     44000 ns/op
PASS
`
	got := parseBench(out)
	fork := got["BenchmarkFork/files=100"]
	if fork["ns/op"].N != 2 || fork["ns/op"].Median != 60000 || fork["p50-µs"].Median != 39 || fork["p99-µs"].Max != 300 {
		t.Fatalf("fork = %+v", fork)
	}
	if got["BenchmarkAbort"]["ns/op"].Median != 44000 {
		t.Fatalf("abort = %+v", got["BenchmarkAbort"])
	}
	if len(got) != 2 {
		t.Fatalf("parsed %d benchmarks, want 2: %v", len(got), got)
	}
}

func TestRenderNamesMissedTargets(t *testing.T) {
	r := &Results{
		BranchOpsInProcess: []branchops.OpsResult{{BaseFiles: 100,
			Fork:   stats.Summarize([]float64{50, 60, 70}),
			Abort:  stats.Summarize([]float64{10}),
			Commit: map[string]stats.Summary{"1KB": stats.Summarize([]float64{1500, 1600, 1700})}}},
		Seq: []seqRow{
			{Server: "nfs-ganesha (VFS)", Client: "c", Write: stats.Summarize([]float64{100}), Read: stats.Summarize([]float64{1000}), ReadCPU: stats.Summarize([]float64{400}), ClientCPU: stats.Summarize([]float64{200})},
			{Server: "branchnfs main", Client: "c", Write: stats.Summarize([]float64{150}), Read: stats.Summarize([]float64{500}), ReadCPU: stats.Summarize([]float64{800}), ClientCPU: stats.Summarize([]float64{300})},
			// Read-only rows: one below ganesha's, one above.
			{Server: "nfs-ganesha (VFS)", Client: catClient, Read: stats.Summarize([]float64{1000})},
			{Server: "branchnfs main", Client: catClient, Read: stats.Summarize([]float64{900})},
			{Server: "nfs-ganesha (VFS)", Client: "d", Read: stats.Summarize([]float64{1000})},
			{Server: "branchnfs depth 3", Client: "d", Read: stats.Summarize([]float64{1100})},
		},
		Storage: []branchops.GrowthResult{{Workload: "EDIT16", AddedMiB: 0.1}, {Workload: "Prepend", AddedMiB: 1}},
		Memory:  []memRow{{Phase: "p", PeakRSS: 500 << 20}},
	}
	md := renderMarkdown(r)
	i := strings.Index(md, "## Targets missed")
	if i < 0 {
		t.Fatalf("no closing section:\n%s", md)
	}
	missed := md[i:]
	for _, want := range []string{"commit 1KB p50 in-process at 100 files", "sequential read, branchnfs main, c:", "sequential read, branchnfs main, " + catClient, "storage Prepend", "server memory during p"} {
		if !strings.Contains(missed, want) {
			t.Errorf("missed targets lack %q:\n%s", want, missed)
		}
	}
	for _, notWant := range []string{"fork p50", "sequential write", "branchnfs depth 3", "storage EDIT16", "abort"} {
		if strings.Contains(missed, notWant) {
			t.Errorf("missed targets name %q, which met its target:\n%s", notWant, missed)
		}
	}
	if !strings.Contains(md, "| branchnfs main | c | 150 (150–150) | 1.50× |") {
		t.Errorf("throughput row or ratio wrong:\n%s", md)
	}
	if !strings.Contains(md, "| branchnfs main | 800 (800–800) | 2.00× | 300 (300–300) | 1.50× |") {
		t.Errorf("server CPU row or ratio wrong:\n%s", md)
	}
}

// TestRenderClientSys checks that libnfs rows get their client's system
// time per read, run by run beside the read figure, and Go rows none.
func TestRenderClientSys(t *testing.T) {
	r := &Results{Seq: []seqRow{
		{Server: "nfs-ganesha (VFS)", Client: "nfs-cp (libnfs)", Read: stats.Summarize([]float64{1400, 600}), ClientSys: stats.Summarize([]float64{100, 350})},
		{Server: "nfs-ganesha (VFS)", Client: catClient, Read: stats.Summarize([]float64{1500}), ClientSys: stats.Summarize([]float64{40})},
		{Server: "branchnfs main", Client: "Go", Read: stats.Summarize([]float64{2000}), ReadCPU: stats.Summarize([]float64{400})},
	}}
	md := renderMarkdown(r)
	for _, want := range []string{
		"| nfs-ganesha (VFS) | nfs-cp (libnfs) | 225 (100–350) | 100 [1400], 350 [600] |",
		"| nfs-ganesha (VFS) | " + catClient + " | 40.0 (40.0–40.0) | 40.0 [1500] |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("client system time row %q missing or wrong:\n%s", want, md)
		}
	}
	i := strings.Index(md, "The libnfs tools' own system CPU")
	if i < 0 {
		t.Fatalf("no client system time table:\n%s", md)
	}
	// The table: from its header line to the blank line after it.
	table := md[i+strings.Index(md[i:], "\n| server"):]
	table = table[:strings.Index(table[1:], "\n\n")+1]
	if strings.Contains(table, "branchnfs main") || !strings.Contains(table, "nfs-ganesha") {
		t.Errorf("a Go-client row is in the client system time table:\n%s", md)
	}
}

func TestStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, utime 250 and stime
	// 75 ticks.
	line := "4242 (ganesha.nfsd (x)) S 1 4242 4242 0 -1 4194560 1200 0 0 0 250 75 0 0 20 0 9 0 100 1000 200 18446744073709551615\n"
	if got := statCPU([]byte(line)); got != 3.25 {
		t.Errorf("statCPU = %v, want 3.25", got)
	}
	if got := statCPU([]byte("garbage")); got != 0 {
		t.Errorf("statCPU(garbage) = %v, want 0", got)
	}
}

func TestKernelRows(t *testing.T) {
	samples := []kernelSample{
		{Server: "branchnfs", Run: 1, Step: "untar", Seconds: 4},
		{Server: "ganesha", Run: 1, Step: "untar", Seconds: 6},
		{Server: "branchnfs", Run: 2, Step: "untar", Seconds: 2},
		{Server: "ganesha", Run: 2, Step: "untar", Seconds: 5, Error: "boom"},
		{Server: "branchnfs", Run: 1, Step: "rm", Seconds: 3},
		{Server: "ganesha", Run: 1, Step: "rm", Seconds: 1},
	}
	rows := kernelRows(samples)
	if len(rows) != 2*2 {
		t.Fatalf("%d rows, want 4 (two servers, the two steps timed)", len(rows))
	}
	if r := rows[0]; r.Server != "branchnfs" || r.Step != "untar" || r.Seconds.N != 2 || r.Seconds.Median != 3 {
		t.Errorf("first row %+v, want branchnfs untar median 3 of 2", r)
	}
	if r := rows[1]; r.Server != "ganesha" || r.Seconds.N != 1 || r.Seconds.Median != 6 {
		t.Errorf("second row %+v, want ganesha untar: the failed run left out", r)
	}
	res := &Results{Kernel: &kernelResult{Rows: rows, Samples: samples}}
	res.Config.KernelRuns = 2
	var b strings.Builder
	var missed []string
	renderKernel(res, func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, &missed)
	// The per-run ratio pairs run 1 only: ganesha's run 2 failed.
	if !strings.Contains(b.String(), "| untar | tar xf of the tree into the mount, then sync | 3.00 (2.00–4.00) | 6.00 (6.00–6.00) | 2.00× | 1.50× (1.50–1.50) |") {
		t.Errorf("table:\n%s", b.String())
	}
	if strings.Contains(b.String(), "| lsR |") || strings.Contains(b.String(), "baseline") {
		t.Errorf("table shows a step not timed or a baseline not run:\n%s", b.String())
	}
	if len(missed) != 1 || !strings.Contains(missed[0], "kernel client rm") {
		t.Errorf("missed = %q, want only rm (3 s vs 1 s)", missed)
	}
}

// With a baseline build, the kernel table gives its time and our ratio
// against it, by the medians and run by run.
func TestKernelRowsBaseline(t *testing.T) {
	var samples []kernelSample
	for r, v := range [][3]float64{{0.5, 0.6, 0.45}, {0.4, 0.5, 0.5}, {0.6, 0.6, 0.6}} {
		for i, srv := range []string{"branchnfs", "baseline", "ganesha"} {
			samples = append(samples, kernelSample{Server: srv, Run: r + 1, Step: "lsR", Seconds: v[i]})
		}
	}
	r, ok := pairedRatio(samples, "baseline", "branchnfs", "lsR")
	if !ok || r.N != 3 || r.Median != 1.2 || r.Min != 1 || r.Max != 1.25 {
		t.Errorf("paired ratio = %+v, %v; want median 1.2 of 3 (1-1.25)", r, ok)
	}
	res := &Results{Kernel: &kernelResult{Rows: kernelRows(samples), Samples: samples}}
	res.Config.KernelRuns, res.Config.KernelSteps = 3, "lsR"
	var b strings.Builder
	var missed []string
	renderKernel(res, func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, &missed)
	if !strings.Contains(b.String(), "| lsR | ls -lR of the tree | 0.50 (0.40–0.60) | 0.60 (0.50–0.60) | 0.50 (0.45–0.60) | 1.00× | 1.00× (0.90–1.25) | 1.20× | 1.20× (1.00–1.25) |") {
		t.Errorf("table:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "Steps timed: lsR") || len(missed) != 0 {
		t.Errorf("missed %q; table:\n%s", missed, b.String())
	}
}

// A baseline build's memory is shown but is not one of our missed targets.
func TestRenderMemoryBaselineNotMissed(t *testing.T) {
	r := &Results{Memory: []memRow{
		{Phase: "metadata, 10 files", PeakRSS: 310 << 20},
		{Phase: "baseline: metadata, 10 files", PeakRSS: 400 << 20},
	}}
	md := renderMarkdown(r)
	missed := md[strings.Index(md, "## Targets missed"):]
	if !strings.Contains(missed, "during metadata, 10 files: 310 MiB") || strings.Contains(missed, "baseline") {
		t.Errorf("targets missed:\n%s", missed)
	}
}

func TestFormatProcs(t *testing.T) {
	got := formatProcs(map[string]uint64{"nfs.LOOKUP": 5, "nfs.ACCESS": 5, "nfs.READ": 9})
	if want := "19 calls (READ 9, ACCESS 5, LOOKUP 5)"; got != want {
		t.Errorf("formatProcs = %q, want %q", got, want)
	}
}

// The client's per-op figures of run 1 are printed per step, branchnfs
// beside ganesha, with branchnfs's own time per call.
func TestRenderKernelClient(t *testing.T) {
	k := &kernelResult{Samples: []kernelSample{
		{Server: "branchnfs", Run: 1, Step: "lsR",
			Procs: map[string]uint64{"nfs.GETATTR": 4}, ServerMicros: map[string]uint64{"nfs.GETATTR": 100},
			Client: map[string]clientOp{"GETATTR": {Ops: 4, BytesRecv: 448, RTTMs: 2, ExecMs: 3}}},
		{Server: "ganesha", Run: 1, Step: "lsR",
			Client: map[string]clientOp{"GETATTR": {Ops: 2, BytesRecv: 224, RTTMs: 1, ExecMs: 1}, "READDIRPLUS": {Ops: 1, BytesRecv: 5000, RTTMs: 3, ExecMs: 4}}},
		{Server: "branchnfs", Run: 2, Step: "lsR", Client: map[string]clientOp{"WRITE": {Ops: 1}}},
	}}
	var b strings.Builder
	renderKernelClient(k, func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	for _, want := range []string{
		"| lsR | GETATTR | 4 / 2 | 112 / 112 | 0.50 / 0.50 | 0.75 / 0.50 | 25 |\n| lsR | READDIRPLUS | — / 1 | — / 5000 | — / 3.00 | — / 4.00 | — |\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "WRITE") {
		t.Errorf("run 2 printed:\n%s", b.String())
	}
}

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/bench/stats"
)

// TestRenderScaleOutTargets checks the scale-out table's verdicts: fork
// and commit p50 under 10 ms on etcd + S3, warm sequential read within 2×
// of Badger's.
func TestRenderScaleOutTargets(t *testing.T) {
	for _, c := range []struct {
		forkUS, commitUS, warmRead float64
		missed                     []string
	}{
		{5e3, 8e3, 450, nil},
		{12e3, 8e3, 450, []string{"fork p50"}},
		{5e3, 11e3, 450, []string{"commit (one new 4 KiB file) p50"}},
		{5e3, 8e3, 300, []string{"sequential read, warm cache"}},
	} {
		x := &scaleOutResult{Backends: []scaleOutRow{
			{Backend: "Badger", Fork: stats.Summarize([]float64{500}), Commit: stats.Summarize([]float64{900}), ReadWarm: stats.Summarize([]float64{800})},
			{Backend: "etcd + S3", Fork: stats.Summarize([]float64{c.forkUS}), Commit: stats.Summarize([]float64{c.commitUS}), ReadWarm: stats.Summarize([]float64{c.warmRead})},
		}}
		var b strings.Builder
		var missed []string
		renderScaleOut(x, func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, &missed)
		if len(missed) != len(c.missed) {
			t.Fatalf("%+v: missed %q, want %q\n%s", c, missed, c.missed, b.String())
		}
		for i, m := range c.missed {
			if !strings.Contains(missed[i], m) {
				t.Fatalf("%+v: missed %q, want one about %q", c, missed, m)
			}
		}
		if !strings.Contains(b.String(), "| fork p50 / p99 |") {
			t.Fatalf("no fork row:\n%s", b.String())
		}
	}
}

// TestRangeCount reads the Range and Txn calls of every status code out
// of an etcd member's metrics, and nothing else.
func TestRangeCount(t *testing.T) {
	m := `# HELP grpc_server_handled_total Total number of RPCs completed on the server.
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 482
grpc_server_handled_total{grpc_code="OutOfRange",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 3
grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 70
grpc_server_started_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 490
`
	if got := rangeCount(m); got != 555 {
		t.Fatalf("rangeCount = %d, want 555", got)
	}
}

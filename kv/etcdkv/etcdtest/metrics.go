package etcdtest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Calls returns how many calls of the KV service's methods (such as
// "Range" and "Txn") the members served so far, from their metrics. The
// members of a cluster run in this process and share one metrics
// registry, so one member's endpoint reports them all. Not for a cluster
// with TLS.
func (c *Cluster) Calls(tb testing.TB, methods ...string) int64 {
	tb.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(c.Endpoints[0] + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "grpc_server_handled_total{") || !strings.Contains(l, `grpc_service="etcdserverpb.KV"`) {
			continue
		}
		for _, m := range methods {
			if !strings.Contains(l, `grpc_method="`+m+`"`) {
				continue
			}
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				tb.Fatalf("etcdtest: metrics line %q: %v", l, err)
			}
			n += int64(v)
		}
	}
	return n
}

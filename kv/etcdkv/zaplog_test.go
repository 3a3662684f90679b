package etcdkv

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestClientLoggerRateLimited: the etcd client's warnings go to the
// store's slog.Logger, one of each message per clientLogTick however
// many the client logs (it logs one per retried request while a cluster
// has no quorum); its info and debug entries are dropped.
func TestClientLoggerRateLimited(t *testing.T) {
	var buf bytes.Buffer
	zl := clientLogger(slog.New(slog.NewTextHandler(&buf, nil))).With(zap.String("target", "etcd-endpoints://x"))
	for range 200 {
		zl.Warn("retrying of unary invoker failed", zap.String("error", "rpc error: code = Unavailable desc = etcdserver: no leader"))
		zl.Info("an info entry")
	}
	zl.Error("another message")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("200 retry warnings, 200 infos and an error logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "etcd client: retrying of unary invoker failed") ||
		!strings.Contains(lines[0], "no leader") || !strings.Contains(lines[0], "etcd-endpoints://x") {
		t.Fatalf("the warning: %s", lines[0])
	}
	if !strings.Contains(lines[1], "level=ERROR") {
		t.Fatalf("the error: %s", lines[1])
	}
}

func TestKeyName(t *testing.T) {
	for key, want := range map[string]string{
		"O\x00\x00\x00\x00\x00\x00\x00\x07": "O+0000000000000007",
		"plain/key":                         "plain/key",
		"\x01\x02":                          "+0102",
	} {
		if got := KeyName([]byte(key)); got != want {
			t.Errorf("KeyName(%q) = %q, want %q", key, got, want)
		}
	}
}

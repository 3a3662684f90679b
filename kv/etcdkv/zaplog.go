package etcdkv

import (
	"context"
	"log/slog"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The etcd client logs through zap, on its own, to stderr: while a
// cluster has no quorum it logs a warning for each retried request
// (about 200 a second for a busy server). clientLogger sends what it
// logs to the store's slog.Logger instead, warnings and worse only, and
// at most clientLogBurst entries of one message per clientLogTick.

// clientLogTick and clientLogBurst bound the etcd client's log entries:
// clientLogBurst of each message (the retry warnings share one) per
// clientLogTick; the rest are dropped.
const (
	clientLogTick  = 10 * time.Second
	clientLogBurst = 1
)

// clientLogger returns the zap logger of an etcd client of a store that
// logs to l.
func clientLogger(l *slog.Logger) *zap.Logger {
	core := zapcore.NewSamplerWithOptions(&slogCore{l: l}, clientLogTick, clientLogBurst, 0)
	return zap.New(core)
}

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	l      *slog.Logger
	fields []zapcore.Field // from With; read only
}

func (c *slogCore) Enabled(lv zapcore.Level) bool { return lv >= zapcore.WarnLevel }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{l: c.l, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields)+2)
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	lv := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		lv = slog.LevelError
	}
	attrs = append(attrs, "rate_limit", "one of each message per "+clientLogTick.String())
	c.l.Log(context.Background(), lv, "etcd client: "+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

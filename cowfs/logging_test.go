package cowfs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// failingStore fails every transaction once fail is set.
type failingStore struct {
	kv.Store
	fail atomic.Bool
}

var errInjected = errors.New("injected failure")

func (s *failingStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	if s.fail.Load() {
		return errInjected
	}
	return s.Store.View(ctx, fn)
}

func (s *failingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if s.fail.Load() {
		return errInjected
	}
	return s.Store.Update(ctx, fn)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLoggerGetsUnexpectedErrors checks that an error flattened to EIO is
// logged to the view's Options.Logger, not to the process's default logger.
func TestLoggerGetsUnexpectedErrors(t *testing.T) {
	_, st, sto := newTestFS(t, Options{})
	fst := &failingStore{Store: st}
	l, err := sto.NewTree(context.Background(), 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var viewLog, defaultLog syncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&defaultLog, nil)))
	defer slog.SetDefault(old)
	f, err := openStore(t, fst, Options{Logger: slog.New(slog.NewTextHandler(&viewLog, &slog.HandlerOptions{Level: slog.LevelDebug}))}).OpenView(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	fst.fail.Store(true)
	for name, call := range map[string]func() error{
		"getattr": func() error { _, err := f.GetAttr(RootIno); return err },
		"billy":   func() error { _, err := f.Billy().Stat("x"); return err },
	} {
		err := call()
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s: %v, want EIO", name, err)
		}
	}
	got := viewLog.String()
	if !strings.Contains(got, "cowfs: unexpected error") || !strings.Contains(got, errInjected.Error()) {
		t.Errorf("view logger got %q, want the unexpected error", got)
	}
	if d := defaultLog.String(); d != "" {
		t.Errorf("the default logger got %q", d)
	}
}

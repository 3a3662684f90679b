package lograte

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	var l Limiter
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at       time.Duration
		ok       bool
		unlogged int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{Every - time.Nanosecond, false, 0},
		{Every, true, 2},
		{Every + time.Second, false, 0},
		{3 * Every, true, 1},
	}
	for _, s := range steps {
		ok, n := l.Allow(t0.Add(s.at))
		if ok != s.ok || n != s.unlogged {
			t.Fatalf("Allow at +%v = %v, %d; want %v, %d", s.at, ok, n, s.ok, s.unlogged)
		}
	}
}

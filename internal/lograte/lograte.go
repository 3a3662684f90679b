package lograte

import (
	"sync"
	"time"
)

// Every is how often a Limiter lets an event be logged, after the first.
const Every = 10 * time.Second

// Limiter decides which events are logged. The zero value is ready to use.
type Limiter struct {
	mu       sync.Mutex // protects the following
	last     time.Time
	unlogged int
}

// Allow reports whether an event at now may be logged, and how many were
// not logged since the last line.
func (l *Limiter) Allow(now time.Time) (ok bool, unlogged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < Every {
		l.unlogged++
		return false, 0
	}
	l.last, unlogged, l.unlogged = now, l.unlogged, 0
	return true, unlogged
}

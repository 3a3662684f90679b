package nfsserver

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// procGovernor sets the Go runtime's processors (GOMAXPROCS) to one while
// the server's calls arrive one at a time, and back to all of them as soon
// as a call starts while another is in flight (Options.AdaptProcs).
//
// A client that sends one call at a time (the Linux client untarring or
// removing a tree, every call waiting for the one before) keeps one
// goroutine busy at a time, but each call still hands work between
// goroutines: to Badger's writer and back, to an fsync. With more than one
// processor, each hand-off wakes another thread to look for work (the
// runtime's spinning threads and sysmon), which finds none and sleeps
// again: the scheduler then took 35-40% of the server's CPU time, and the
// server 1.5x ganesha's CPU time over a kernel-client untar, which it took
// from the guest running that client. With one processor the hand-off is a
// switch on the same thread. In a run of the kernel-client tree workload
// with GOMAXPROCS=1 (docs/benchmarks.md), the server's CPU time over the
// untar fell from 3.12 s to 2.27 s and over rm -rf from 0.35 s to 0.17 s.
//
// Parallel work needs the processors back at once: the first call that
// starts with another in flight raises them (a stop of the world, some
// microseconds), and they are lowered again only after procsQuiet without
// such a call. Work the server does without calls (the control API's
// commits and merges, garbage collection, Badger's compactions) runs on
// one processor while no calls overlap.
type procGovernor struct {
	max int             // the processors to raise to; read only
	set func(n int) int // runtime.GOMAXPROCS; read only (tests)

	mu      sync.Mutex   // held while changing the processors
	low     atomic.Bool  // the processors are at one
	overlap atomic.Bool  // a call started with another in flight since the watcher's last look
	calls   atomic.Int64 // calls started and not yet answered

	raised, lowered atomic.Uint64
}

const (
	// procsTick is how often the watcher looks for overlapping calls.
	procsTick = 100 * time.Millisecond
	// procsQuiet is how long no call may overlap another before the
	// processors are lowered to one.
	procsQuiet = time.Second
)

// newProcGovernor returns a governor of set's processors, or nil if there
// is only one.
func newProcGovernor(set func(int) int) *procGovernor {
	if set == nil {
		set = runtime.GOMAXPROCS
	}
	max := set(0)
	if max <= 1 {
		return nil
	}
	return &procGovernor{max: max, set: set}
}

// callStarted is called as a call arrives (before it waits for a
// goroutine), callEnded once its reply is ready (before it is sent: the
// client may send its next call as soon as it has the reply).
func (g *procGovernor) callStarted() {
	if g == nil || g.calls.Add(1) < 2 {
		return
	}
	if !g.overlap.Load() {
		g.overlap.Store(true)
	}
	if g.low.Load() {
		g.setLow(false)
	}
}

func (g *procGovernor) callEnded() {
	if g != nil {
		g.calls.Add(-1)
	}
}

// setLow lowers the processors to one, or raises them to max.
func (g *procGovernor) setLow(low bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.low.Load() == low {
		return
	}
	if low {
		g.set(1)
		g.lowered.Add(1)
	} else {
		g.set(g.max)
		g.raised.Add(1)
	}
	g.low.Store(low)
}

// watch lowers the processors after procsQuiet without overlapping calls,
// until stop is closed; then it raises them.
func (g *procGovernor) watch(stop <-chan struct{}, tick time.Duration, quietTicks int) {
	t := time.NewTicker(tick)
	defer t.Stop()
	quiet := 0
	for {
		select {
		case <-t.C:
		case <-stop:
			g.setLow(false)
			return
		}
		if g.overlap.Swap(false) {
			quiet = 0
			continue
		}
		if quiet++; quiet >= quietTicks && !g.low.Load() {
			g.setLow(true)
		}
	}
}

// counts returns how many times the processors were lowered and raised.
func (g *procGovernor) counts() (lowered, raised uint64) {
	if g == nil {
		return 0, 0
	}
	return g.lowered.Load(), g.raised.Load()
}

package nfsserver

import (
	"sync/atomic"
	"time"
)

// workers runs the calls that do not run inline (readCalls) on goroutines
// that outlive them: one that finished a call waits, for workerIdle, to
// be handed the next call of any connection.
//
// A goroutine per call started on the smallest stack and grew it, by
// copying, down the depth of a READ's call chain (the store, Badger),
// every time: runtime.newstack was 4% of the server's CPU over
// sequential reads (docs/benchmarks.md), and the goroutine's exit
// another 3%. A waiting worker keeps its grown stack (until a garbage
// collection finds it mostly unused and shrinks it).
//
// The zero value works: with no channel, every call gets a goroutine of
// its own, which ends with it (servers built by tests without New).
type workers struct {
	calls chan func() // unbuffered: a send succeeds only to a waiting worker
	stop  <-chan struct{}

	started, ended atomic.Int64 // workers (tests)
}

// workerIdle is how long a worker waits for a call before it ends.
const workerIdle = 10 * time.Second

// run runs call on a waiting worker, or on a new one.
func (w *workers) run(call func()) {
	select {
	case w.calls <- call:
	default:
		w.started.Add(1)
		go w.work(call)
	}
}

// work runs call, then each call handed to it, until none comes for
// workerIdle or the server closes.
func (w *workers) work(call func()) {
	defer w.ended.Add(1)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		call()
		call = nil // drop what it holds while waiting
		idle.Reset(workerIdle)
		select {
		case call = <-w.calls:
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}

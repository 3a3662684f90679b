package nfsserver

import (
	"sync"
	"testing"
	"time"
)

// TestWorkersReuse: calls run one after another go to the worker that ran
// the one before, calls run at once each get a worker, and every worker
// ends when the server stops.
func TestWorkersReuse(t *testing.T) {
	stop := make(chan struct{})
	w := &workers{calls: make(chan func()), stop: stop}
	for range 100 {
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
		time.Sleep(time.Millisecond) // for the worker to wait again
	}
	if n := w.started.Load(); n > 10 {
		t.Fatalf("100 calls in a row started %d workers, want them reused", n)
	}
	before := w.started.Load()
	var wg sync.WaitGroup
	release := make(chan struct{})
	const parallel = 8
	wg.Add(parallel)
	for range parallel {
		w.run(func() {
			wg.Done()
			<-release
		})
	}
	wg.Wait() // all 8 run at once: none waited for another
	close(release)
	if n := w.started.Load(); n < parallel || n > before+parallel {
		t.Fatalf("%d workers started in all, %d before 8 calls at once", n, before)
	}
	close(stop)
	deadline := time.Now().Add(10 * time.Second)
	for w.ended.Load() != w.started.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers ended after the stop", w.ended.Load(), w.started.Load())
		}
		time.Sleep(time.Millisecond)
	}
	// The zero value: a goroutine per call.
	var z workers
	done := make(chan struct{})
	z.run(func() { close(done) })
	<-done
}

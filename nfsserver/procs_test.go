package nfsserver

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeProcs stands for runtime.GOMAXPROCS.
type fakeProcs struct{ n atomic.Int64 }

func (f *fakeProcs) set(n int) int {
	if n < 1 {
		return int(f.n.Load())
	}
	return int(f.n.Swap(int64(n)))
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestProcGovernor checks that the processors go to one after a quiet
// spell, back to all of them at once when a call starts with another in
// flight, and back to all of them when the governor stops.
func TestProcGovernor(t *testing.T) {
	f := &fakeProcs{}
	f.n.Store(1)
	if g := newProcGovernor(f.set); g != nil {
		t.Fatal("a governor of one processor")
	}
	f.n.Store(4)
	g := newProcGovernor(f.set)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { g.watch(stop, time.Millisecond, 3); close(done) }()

	waitFor(t, "the processors are lowered", func() bool { return f.n.Load() == 1 })
	// Calls one at a time: the processors stay at one.
	for range 100 {
		g.callStarted()
		g.callEnded()
	}
	if f.n.Load() != 1 {
		t.Fatalf("calls one at a time raised the processors to %d", f.n.Load())
	}
	// Two at once: raised before the second call runs.
	g.callStarted()
	g.callStarted()
	if f.n.Load() != 4 {
		t.Fatalf("two calls in flight: %d processors, want 4", f.n.Load())
	}
	g.callEnded()
	g.callEnded()
	waitFor(t, "the processors are lowered again", func() bool { return f.n.Load() == 1 })
	if l, r := g.counts(); l < 2 || r != 1 {
		t.Fatalf("lowered %d times, raised %d, want at least 2 and 1", l, r)
	}
	close(stop)
	<-done
	if f.n.Load() != 4 {
		t.Fatalf("stopped with %d processors, want 4", f.n.Load())
	}
	var nilGov *procGovernor
	nilGov.callStarted()
	nilGov.callEnded()
	if l, r := nilGov.counts(); l != 0 || r != 0 {
		t.Fatal("a nil governor counted changes")
	}
}

// TestAdaptProcs runs a server whose governor sets fake processors: a
// client sending one call at a time, over several connections one after
// another, leaves them at one; READs sent on two connections at once
// raise them; the server reports both in its metrics.
func TestAdaptProcs(t *testing.T) {
	f := &fakeProcs{}
	f.n.Store(2)
	m := newManager(t, t.TempDir())
	s, addr := startServer(t, m, func(s *Server) {
		s.procs = newProcGovernor(f.set)
		go s.procs.watch(s.closeCh, time.Millisecond, 5)
	})
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	root := c.mnt("/main")
	fh, _, st := k.create(root, "f", 1, sa{mode: u32p(0o644)})
	must(t, st, "create")
	data := make([]byte, 1<<20)
	_, _, _, st = k.write(fh, 0, data, fileSync)
	must(t, st, "write")
	waitFor(t, "the processors are lowered", func() bool { return f.n.Load() == 1 })

	for i := range 200 {
		k := k
		if i%50 == 0 {
			k = dialRaw(t, addr).as(authRoot)
		}
		if _, st := k.getattr(fh); st != 0 {
			t.Fatalf("GETATTR: %v", st)
		}
		if _, _, st := k.read(fh, 0, 1<<20); st != 0 {
			t.Fatalf("READ: %v", st)
		}
	}
	if got := s.Metrics().ProcsRaised; got != 0 || f.n.Load() != 1 {
		t.Fatalf("calls one at a time: raised %d times, %d processors", got, f.n.Load())
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		k := dialRaw(t, addr).as(authRoot)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, st := k.read(fh, 0, 1<<20); st != 0 {
					t.Errorf("READ: %v", st)
					return
				}
			}
		}()
	}
	waitFor(t, "READs on two connections raise the processors", func() bool { return s.Metrics().ProcsRaised > 0 })
	close(stop)
	wg.Wait()
	if mt := s.Metrics(); mt.ProcsLowered == 0 {
		t.Fatalf("metrics: lowered %d, raised %d", mt.ProcsLowered, mt.ProcsRaised)
	}
	waitFor(t, "the processors are lowered again", func() bool { return f.n.Load() == 1 })
}

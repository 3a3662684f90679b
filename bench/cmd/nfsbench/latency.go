package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/stats"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// latencyRow is the latency of one RPC while one kind of background work
// ran, in microseconds.
type latencyRow struct {
	Work    string  `json:"work"`
	Seconds float64 `json:"seconds"` // how long the work ran
	RPC     string  `json:"rpc"`
	N       int     `json:"n"`
	P50     float64 `json:"p50_us"`
	P99     float64 `json:"p99_us"`
	P999    float64 `json:"p999_us"`
	Max     float64 `json:"max_us"`
	Errors  int     `json:"errors"`
}

var latencyRPCs = []string{"GETATTR", "LOOKUP", "READ", "WRITE"}

// prober issues GETATTR, LOOKUP, READ and WRITE of 4 KiB in branch main,
// each from its own connection, one call every 2 ms, and files each
// latency under the current phase.
type prober struct {
	phase atomic.Pointer[string]
	stop  atomic.Bool
	wg    sync.WaitGroup
	mu    sync.Mutex // protects the following
	lat   map[string]map[string][]time.Duration
	errs  map[string]map[string]int
	worst map[string]worstCall
	first error
}

// record files a call under the phase current when it started (a call
// that a phase's work held up may end after the phase).
func (pr *prober) record(ph *string, rpc string, start time.Time, d time.Duration, err error) {
	if ph == nil {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if err != nil {
		if pr.errs[*ph] == nil {
			pr.errs[*ph] = map[string]int{}
		}
		pr.errs[*ph][rpc]++
		if pr.first == nil {
			pr.first = fmt.Errorf("%s during %s: %w", rpc, *ph, err)
		}
		return
	}
	if pr.lat[*ph] == nil {
		pr.lat[*ph] = map[string][]time.Duration{}
	}
	pr.lat[*ph][rpc] = append(pr.lat[*ph][rpc], d)
	if d > pr.worst[*ph].d {
		pr.worst[*ph] = worstCall{rpc, start, d}
	}
}

type worstCall struct {
	rpc   string
	start time.Time
	d     time.Duration
}

func startProber(t nfsclient.Target) (*prober, error) {
	pr := &prober{lat: map[string]map[string][]time.Duration{}, errs: map[string]map[string]int{}, worst: map[string]worstCall{}}
	setup, err := nfsclient.Dial(t)
	if err != nil {
		return nil, err
	}
	defer setup.Close()
	rfh, err := setup.Create(setup.Root, "probe-r.bin", 0o644)
	if err != nil {
		return nil, err
	}
	if err := setup.WriteFull(rfh, 0, workload.Data(11, 1<<20), nfsclient.FileSync); err != nil {
		return nil, err
	}
	wfh, err := setup.Create(setup.Root, "probe-w.bin", 0o644)
	if err != nil {
		return nil, err
	}
	for _, rpc := range latencyRPCs {
		c, err := nfsclient.Dial(t)
		if err != nil {
			pr.halt()
			return nil, err
		}
		pr.wg.Add(1)
		go func() {
			defer pr.wg.Done()
			defer c.Close()
			buf := workload.Data(12, 4096)
			for i := 0; !pr.stop.Load(); i++ {
				off := uint64(i%256) * 4096
				ph := pr.phase.Load()
				t0 := time.Now()
				var err error
				switch rpc {
				case "GETATTR":
					_, err = c.GetAttr(c.Root)
				case "LOOKUP":
					_, _, err = c.Lookup(c.Root, "probe-r.bin")
				case "READ":
					_, _, err = c.Read(rfh, off, buf)
				case "WRITE":
					_, err = c.Write(wfh, off, buf, nfsclient.Unstable)
				}
				pr.record(ph, rpc, t0, time.Since(t0), err)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	return pr, nil
}

func (pr *prober) set(phase string) { pr.phase.Store(&phase) }
func (pr *prober) pause()           { pr.phase.Store(nil) }
func (pr *prober) halt()            { pr.stop.Store(true); pr.wg.Wait() }

// latency measures GETATTR, LOOKUP, READ and WRITE latencies in main while
// heavy work runs in the server: nothing (idle), a merge commit of a large
// branch into main, a fold of main's deep stack, an import of a tree of
// files over NFS into another branch, and the reclamation of a large
// aborted branch. One phase at a time, in one server.
func (s *suite) latency(ctx context.Context) {
	if err := s.latencyRun(ctx); err != nil {
		s.fail("latency", err)
	}
}

func (s *suite) latencyRun(ctx context.Context) error {
	mib := s.cfg.LatencyMiB
	s.logf("latency under load: %d MiB branches", mib)
	store, _, err := s.newStore("lat", 1000)
	if err != nil {
		return err
	}
	defer os.RemoveAll(store)
	srv, err := startBranchnfs(s.bnfs, store, filepath.Join(s.tmp, "branchnfs-latency.log"))
	if err != nil {
		return err
	}
	defer srv.stop()
	c, _, err := control.Dial(ctx, control.SocketPath(store), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	pr, err := startProber(srv.target("main"))
	if err != nil {
		return err
	}
	defer pr.halt()
	phases := map[string]float64{}
	var order []string
	run := func(work string, fn func() error) error {
		s.logf("latency: %s", work)
		pr.set(work)
		t0 := time.Now()
		err := fn()
		phases[work] = time.Since(t0).Seconds()
		order = append(order, work)
		pr.pause()
		if err != nil {
			return fmt.Errorf("%s: %w", work, err)
		}
		return nil
	}
	mainWrite := func(name string, n int) error {
		return nfsWrite(srv.target("main"), name, workload.Data(uint64(len(name)), n))
	}

	if err := run("idle", func() error { time.Sleep(3 * time.Second); return nil }); err != nil {
		return err
	}

	// A merge commit: main changed after the fork, so the commit merges.
	if _, err := c.Fork(ctx, "main", "big"); err != nil {
		return err
	}
	if err := nfsWriteGen(srv.target("big"), "big.bin", mib, 100); err != nil {
		return err
	}
	if err := mainWrite("main-change.txt", 100); err != nil {
		return err
	}
	if err := waitBackground(ctx, c); err != nil {
		return err
	}
	var fast bool
	if err := run(fmt.Sprintf("commit merging %d MiB", mib), func() error {
		r, err := c.ForceCommit(ctx, "big") // the client never unmounts
		fast = r.FastPath
		return err
	}); err != nil {
		return err
	}
	if fast {
		s.res.Notes = append(s.res.Notes, "latency: the large commit took the fast path, not a merge")
	}

	// A fold: each fork of main after a write stacks a layer on main; past
	// the fold depth the background pass folds, the merged layer first.
	if err := waitBackground(ctx, c); err != nil {
		return err
	}
	for i := 0; i < 9; i++ {
		if err := mainWrite(fmt.Sprintf("deep-%d.txt", i), 100); err != nil {
			return err
		}
		name := fmt.Sprintf("deep%d", i)
		if _, err := c.Fork(ctx, "main", name); err != nil {
			return err
		}
		if _, err := c.Abort(ctx, name); err != nil {
			return err
		}
	}
	before, err := backgroundMetrics(ctx, c)
	if err != nil {
		return err
	}
	if err := run("fold of main's stack", func() error {
		after, err := waitPass(ctx, c, before)
		if err == nil && after.FoldedLayers == before.FoldedLayers {
			s.res.Notes = append(s.res.Notes, "latency: the background pass folded nothing")
		}
		return err
	}); err != nil {
		return err
	}

	// An import: a client copies a tree of files into a branch.
	if _, err := c.Fork(ctx, "main", "imp"); err != nil {
		return err
	}
	files := max(100, mib) // 64 KiB each: a sixteenth of the large branch
	if err := run(fmt.Sprintf("import of %d files over NFS", files), func() error {
		return nfsTree(srv.target("imp"), files, 64<<10)
	}); err != nil {
		return err
	}
	if _, err := c.ForceAbort(ctx, "imp"); err != nil {
		return err
	}
	if err := waitBackground(ctx, c); err != nil {
		return err
	}

	// Reclamation of a large aborted branch.
	if _, err := c.Fork(ctx, "main", "gone"); err != nil {
		return err
	}
	if err := nfsWriteGen(srv.target("gone"), "gone.bin", mib, 200); err != nil {
		return err
	}
	if err := waitBackground(ctx, c); err != nil {
		return err
	}
	if before, err = backgroundMetrics(ctx, c); err != nil {
		return err
	}
	if err := run(fmt.Sprintf("reclaim of an aborted %d MiB branch", mib), func() error {
		if _, err := c.ForceAbort(ctx, "gone"); err != nil {
			return err
		}
		after, err := waitPass(ctx, c, before)
		if err == nil && after.ReclaimedBlocks-before.ReclaimedBlocks < int64(mib) {
			s.res.Notes = append(s.res.Notes, fmt.Sprintf("latency: the reclaim pass deleted %d blocks only", after.ReclaimedBlocks-before.ReclaimedBlocks))
		}
		return err
	}); err != nil {
		return err
	}
	pr.halt()
	if pr.first != nil {
		s.res.Notes = append(s.res.Notes, "latency: first probe error: "+pr.first.Error())
	}
	for _, work := range order {
		if w := pr.worst[work]; w.d > 0 {
			s.logf("latency: %s: slowest call %s of %s at %s", work, w.rpc, w.d.Round(time.Millisecond), w.start.Format("15:04:05.000"))
		}
		for _, rpc := range latencyRPCs {
			ds := pr.lat[work][rpc]
			us := stats.Micros(ds)
			slices.Sort(us)
			row := latencyRow{Work: work, Seconds: phases[work], RPC: rpc, N: len(us), Errors: pr.errs[work][rpc]}
			if len(us) > 0 {
				row.P50, row.P99, row.P999, row.Max = stats.Percentile(us, 50), stats.Percentile(us, 99), stats.Percentile(us, 99.9), us[len(us)-1]
			}
			s.res.Latency = append(s.res.Latency, row)
		}
	}
	return nil
}

func backgroundMetrics(ctx context.Context, c *control.Client) (branches.Metrics, error) {
	var m branches.Metrics
	st, err := c.Status(ctx)
	if err != nil {
		return m, err
	}
	if st.Branches == nil {
		return m, errors.New("the server reports no background counters (branches in /v1/status)")
	}
	b, _ := jsonMarshal(st.Branches)
	err = jsonUnmarshal(b, &m)
	return m, err
}

// waitPass waits until a background pass (reclaim, fold) that started
// after before ends.
func waitPass(ctx context.Context, c *control.Client, before branches.Metrics) (branches.Metrics, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		m, err := backgroundMetrics(ctx, c)
		if err != nil || m.BackgroundPasses > before.BackgroundPasses {
			return m, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return before, errors.New("no background pass ended within 10 minutes")
}

// waitBackground waits until the server's background work is idle: no
// pass ended within 3 s (passes start 2 s after a commit or abort).
func waitBackground(ctx context.Context, c *control.Client) error {
	last, err := backgroundMetrics(ctx, c)
	if err != nil {
		return err
	}
	quiet := time.Now()
	for time.Since(quiet) < 3*time.Second {
		time.Sleep(100 * time.Millisecond)
		m, err := backgroundMetrics(ctx, c)
		if err != nil {
			return err
		}
		if m != last {
			last, quiet = m, time.Now()
		}
	}
	return nil
}

// nfsWriteGen writes mib MiB of incompressible, unique data to a new file in
// an export's root, 1 MiB at a time.
func nfsWriteGen(t nfsclient.Target, name string, mib int, seed uint64) error {
	c, err := nfsclient.Dial(t)
	if err != nil {
		return err
	}
	defer c.Close()
	fh, err := c.Create(c.Root, name, 0o644)
	if err != nil {
		return err
	}
	for i := 0; i < mib; i++ {
		if err := c.WriteFull(fh, uint64(i)<<20, workload.Data(seed<<20+uint64(i), 1<<20), nfsclient.Unstable); err != nil {
			return err
		}
	}
	return c.Commit(fh)
}

// nfsTree writes n files of size bytes, 100 per directory, into an export.
func nfsTree(t nfsclient.Target, n, size int) error {
	c, err := nfsclient.Dial(t)
	if err != nil {
		return err
	}
	defer c.Close()
	var dir []byte
	for i := 0; i < n; i++ {
		if i%100 == 0 {
			if dir, err = c.Mkdir(c.Root, fmt.Sprintf("d%03d", i/100), 0o755); err != nil {
				return err
			}
		}
		fh, err := c.Create(dir, fmt.Sprintf("f%05d", i), 0o644)
		if err != nil {
			return err
		}
		if err := c.WriteFull(fh, 0, workload.Data(uint64(i)+1e6, size), nfsclient.Unstable); err != nil {
			return err
		}
		if err := c.Commit(fh); err != nil {
			return err
		}
	}
	return nil
}

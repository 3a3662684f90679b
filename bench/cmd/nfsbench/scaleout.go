package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/bench/stats"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// The scale-out section: the same operations on a server whose metadata
// is in a local Badger and on one whose metadata is in a 3-member etcd
// cluster and whose blocks are in an S3 bucket (versitygw), side by side
// from one run. Both clusters run on this machine, on loopback: the
// figures are the software's cost, not a network's.

// scaleOutResult is the section's JSON.
type scaleOutResult struct {
	Etcd     string        `json:"etcd"`
	S3       string        `json:"s3"`
	BaseFile int           `json:"base_files"`
	Backends []scaleOutRow `json:"backends"`
}

// scaleOutRow holds one backend's figures: latencies in µs, throughput in
// MiB/s, creates in files/s.
type scaleOutRow struct {
	Backend  string        `json:"backend"`
	Fork     stats.Summary `json:"fork_us"`
	Commit   stats.Summary `json:"commit_us"` // a branch with one new 4 KiB file
	Abort    stats.Summary `json:"abort_us"`
	SeqWrite stats.Summary `json:"seq_write_mibps"`
	ReadWarm stats.Summary `json:"seq_read_warm_mibps"` // right after the write
	ReadCold stats.Summary `json:"seq_read_cold_mibps"` // after a server restart (and an emptied block cache)
	Create   stats.Summary `json:"create_ops"`          // CREATE + one 1 KiB FILE_SYNC WRITE per file
	Stat     stats.Summary `json:"stat_ops"`
	// ReadCPU is the server's CPU time (user + system) per GiB of warm
	// sequential read.
	ReadCPU stats.Summary `json:"server_cpu_ms_per_gib_warm_read"`
	// RequestsPerRead is the etcd requests (Range and Txn calls) the
	// cluster served per READ of the warm read, from the members' metrics.
	RequestsPerRead stats.Summary `json:"etcd_requests_per_warm_read,omitempty"`
	Error           string        `json:"error,omitempty"`
}

// scaleBackend is one server under test in the section.
type scaleBackend struct {
	label string
	store string
	args  []string // init flags besides --store and --from
	cache string   // the block cache to empty for a cold read ("" for none)
	srv   *server
	row   *scaleOutRow
}

// versitygw runs an S3 server on a directory, on a free loopback port.
type versitygw struct {
	endpoint, bucket, access, secret string
	cmd                              *exec.Cmd
	done                             chan struct{}
}

func startVersitygw(bin, dir string) (*versitygw, error) {
	v := &versitygw{bucket: "blobs", access: "nfsbench", secret: "nfsbench-secret"}
	root := filepath.Join(dir, "s3root")
	if err := os.MkdirAll(filepath.Join(root, v.bucket), 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	v.endpoint = l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return nil, err
	}
	v.cmd = exec.Command(bin, "--port", v.endpoint, "--quiet", "posix", root)
	v.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+v.access, "ROOT_SECRET_ACCESS_KEY="+v.secret)
	v.cmd.Stdout, v.cmd.Stderr = logf, logf
	if err := v.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	v.done = make(chan struct{})
	go func() { v.cmd.Wait(); logf.Close(); close(v.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-v.done:
			return nil, fmt.Errorf("versitygw exited: %s", tail(logf.Name(), 10))
		default:
		}
		if c, err := net.DialTimeout("tcp", v.endpoint, time.Second); err == nil {
			c.Close()
			return v, nil
		}
		if time.Now().After(deadline) {
			v.stop()
			return nil, fmt.Errorf("versitygw does not accept connections on %s after 30 s", v.endpoint)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (v *versitygw) stop() {
	v.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-v.done:
	case <-time.After(5 * time.Second):
		v.cmd.Process.Kill()
		<-v.done
	}
}

func (s *suite) scaleOut(ctx context.Context) {
	switch {
	case s.bnfs == "":
		s.fail("scale-out", fmt.Errorf("needs --branchnfs"))
		return
	case s.etcdMember == "" || s.versitygw == "":
		s.fail("scale-out", fmt.Errorf("needs --etcdmember and --versitygw (scripts/bench --backend etcd+s3 builds both)"))
		return
	}
	dir := filepath.Join(s.tmp, "scaleout")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.fail("scale-out", err)
		return
	}
	s.logf("scale-out: starting 3 etcd members and versitygw")
	cluster, err := testbin.LaunchEtcd(s.etcdMember, dir, testbin.EtcdOptions{User: testbin.Current(), QuotaBackendBytes: 8 << 30})
	if err != nil {
		s.fail("scale-out: etcd", err)
		return
	}
	defer cluster.StopAll()
	gw, err := startVersitygw(s.versitygw, dir)
	if err != nil {
		s.fail("scale-out: versitygw", err)
		return
	}
	defer gw.stop()
	// The servers and the CLI read S3 credentials from the environment.
	os.Setenv("AWS_ACCESS_KEY_ID", gw.access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", gw.secret)
	var hosts []string
	for _, ep := range cluster.Endpoints {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	res := &scaleOutResult{BaseFile: 1000,
		Etcd: "3 members (etcd server v3.6 embed, one process each), loopback, --quota-backend-bytes 8 GiB, fsync on",
		S3:   "versitygw posix backend, loopback, plain HTTP"}
	s.res.ScaleOut = res
	bs := []*scaleBackend{
		{label: "Badger (local)"},
		{label: "etcd + S3", args: []string{"--meta", "etcd://" + strings.Join(hosts, ",") + "/nfsbench/",
			"--blocks", fmt.Sprintf("s3://%s/b/?endpoint=%s&insecure=1&region=us-east-1", gw.bucket, gw.endpoint),
			"--blocks-cache-size", "2G"}},
	}
	src := filepath.Join(dir, "src")
	if err := makeTree(src, res.BaseFile); err != nil {
		s.fail("scale-out", err)
		return
	}
	res.Backends = make([]scaleOutRow, len(bs))
	for i, b := range bs {
		res.Backends[i].Backend = b.label
		b.row = &res.Backends[i]
		b.store = filepath.Join(dir, fmt.Sprintf("store%d", i))
		if len(b.args) > 0 {
			b.cache = filepath.Join(b.store, "blocks-cache")
		}
		args := append([]string{"init", "--store", b.store, "--from", src}, b.args...)
		if _, err := branchnfsCLI(s.bnfs, args...); err != nil {
			b.row.Error = err.Error()
			s.fail("scale-out "+b.label, err)
			continue
		}
		if b.srv, err = startBranchnfs(s.bnfs, b.store, filepath.Join(dir, fmt.Sprintf("branchnfs%d.log", i))); err != nil {
			b.row.Error = err.Error()
			s.fail("scale-out "+b.label, err)
		}
	}
	defer func() {
		for _, b := range bs {
			b.srv.stop()
		}
	}()
	// each runs fn on every backend still without an error, interleaved
	// so that load from elsewhere on the machine spreads over both.
	each := func(what string, fn func(b *scaleBackend) error) {
		for _, b := range bs {
			if b.row.Error != "" || b.srv == nil {
				continue
			}
			if err := fn(b); err != nil {
				if b.srv != nil {
					// The temporary directory goes at the end: keep what
					// the server said.
					err = fmt.Errorf("%w; the server's log ends:\n%s", err, tail(b.srv.logPath, 15))
				}
				b.row.Error = fmt.Sprintf("%s: %v", what, err)
				s.fail("scale-out "+b.label+": "+what, err)
			}
		}
	}

	// Fork, abort and a small commit, through the control API.
	n := s.cfg.OpRuns
	type lat struct{ fork, abort, commit []float64 }
	lats := make([]lat, len(bs))
	for run := 0; run < n; run++ {
		each("branch operations", func(b *scaleBackend) error {
			l := &lats[indexOf(bs, b)]
			c, _, err := control.Dial(ctx, control.SocketPath(b.store), 10*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			t := time.Now()
			if _, err := c.Fork(ctx, "main", fmt.Sprintf("f%d", run)); err != nil {
				return fmt.Errorf("fork: %w", err)
			}
			l.fork = append(l.fork, float64(time.Since(t).Microseconds()))
			t = time.Now()
			if _, err := c.Abort(ctx, fmt.Sprintf("f%d", run)); err != nil {
				return fmt.Errorf("abort: %w", err)
			}
			l.abort = append(l.abort, float64(time.Since(t).Microseconds()))
			name := fmt.Sprintf("c%d", run)
			if _, err := c.Fork(ctx, "main", name); err != nil {
				return fmt.Errorf("fork: %w", err)
			}
			if err := nfsWrite(b.srv.target(name), name+".bin", workload.Data(uint64(run), 4096)); err != nil {
				return fmt.Errorf("write over NFS: %w", err)
			}
			t = time.Now()
			if _, err := c.ForceCommit(ctx, name); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			l.commit = append(l.commit, float64(time.Since(t).Microseconds()))
			return nil
		})
	}
	for i, b := range bs {
		b.row.Fork, b.row.Abort, b.row.Commit = stats.Summarize(lats[i].fork), stats.Summarize(lats[i].abort), stats.Summarize(lats[i].commit)
	}

	// The data workloads run in a branch: with several servers possible
	// on etcd, main changes only through commits.
	each("fork "+workBranch, func(b *scaleBackend) error {
		c, _, err := control.Dial(ctx, control.SocketPath(b.store), 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Fork(ctx, "main", workBranch)
		return err
	})

	// Sequential write and warm read (the block cache holds what was
	// just written), new content each run so that no block is already
	// stored.
	size := s.cfg.SeqMiB << 20
	type thr struct{ w, r, cpu, ranges, cold, create, stat []float64 }
	thrs := make([]thr, len(bs))
	opts := workload.SeqOptions{ReqSize: s.cfg.ReqSize, Conns: s.cfg.Conns, Depth: s.cfg.Depth,
		// On etcd, removing a file of more blocks than a transaction
		// holds fails (NFS3ERR_FBIG): keep each run's file.
		Keep: true}
	for run := 0; run < s.cfg.Runs; run++ {
		data := workload.Data(uint64(100+run), size)
		each("sequential", func(b *scaleBackend) error {
			s.logf("scale-out %s: sequential %d MiB, run %d", b.label, s.cfg.SeqMiB, run+1)
			o := opts
			o.Name = fmt.Sprintf("seq%d.bin", run)
			var cpu0, cpu float64
			var r0, r1 int64
			var rerr error
			o.BeforeRead = func() {
				cpu0 = b.srv.cpuSeconds()
				if b.cache != "" {
					r0, rerr = etcdRanges(cluster.Endpoints)
				}
			}
			o.AfterRead = func() {
				cpu = b.srv.cpuSeconds() - cpu0
				if b.cache != "" && rerr == nil {
					r1, rerr = etcdRanges(cluster.Endpoints)
				}
			}
			r, err := workload.Seq(b.srv.target(workBranch), data, o)
			if err != nil {
				return err
			}
			t := &thrs[indexOf(bs, b)]
			if cpu0 > 0 {
				t.cpu = append(t.cpu, cpu*1000/(float64(size)/(1<<30)))
			}
			if b.cache != "" && rerr == nil && r1 > r0 {
				t.ranges = append(t.ranges, float64(r1-r0)/float64((size+opts.ReqSize-1)/opts.ReqSize))
			}
			t.w, t.r = append(t.w, r.WriteMiBps), append(t.r, r.ReadMiBps)
			return nil
		})
	}
	// Cold reads: the server restarted (and its block cache emptied)
	// before each read of a file written once.
	cold := workload.Data(99, size)
	each("cold read", func(b *scaleBackend) error { return nfsWrite(b.srv.target(workBranch), "cold.bin", cold) })
	for run := 0; run < s.cfg.Runs; run++ {
		each("cold read", func(b *scaleBackend) error {
			if err := b.srv.stop(); err != nil {
				return err
			}
			b.srv = nil
			if b.cache != "" {
				if err := os.RemoveAll(b.cache); err != nil {
					return err
				}
			}
			srv, err := startBranchnfs(s.bnfs, b.store, filepath.Join(dir, fmt.Sprintf("branchnfs%d-cold%d.log", indexOf(bs, b), run)))
			if err != nil {
				return err
			}
			b.srv = srv
			s.logf("scale-out %s: cold read, run %d", b.label, run+1)
			v, err := workload.ReadExisting(srv.target(workBranch), "cold.bin", cold, opts)
			if err != nil {
				return err
			}
			t := &thrs[indexOf(bs, b)]
			t.cold = append(t.cold, v)
			return nil
		})
	}
	// Small files: create (with one 1 KiB FILE_SYNC write each) and stat.
	for run := 0; run < s.cfg.Runs; run++ {
		each("small files", func(b *scaleBackend) error {
			s.logf("scale-out %s: %d small files, run %d", b.label, s.cfg.MetaFiles, run+1)
			r, err := workload.Meta(b.srv.target(workBranch), workload.MetaOptions{Dir: fmt.Sprintf("meta%d", run), Files: s.cfg.MetaFiles, FileSize: 1024, Workers: s.cfg.MetaWorkers})
			if err != nil {
				return err
			}
			t := &thrs[indexOf(bs, b)]
			t.create, t.stat = append(t.create, r.CreateOps), append(t.stat, r.StatOps)
			return nil
		})
	}
	for i, b := range bs {
		t := thrs[i]
		b.row.SeqWrite, b.row.ReadWarm, b.row.ReadCold = stats.Summarize(t.w), stats.Summarize(t.r), stats.Summarize(t.cold)
		b.row.ReadCPU = stats.Summarize(t.cpu)
		b.row.RequestsPerRead = stats.Summarize(t.ranges)
		b.row.Create, b.row.Stat = stats.Summarize(t.create), stats.Summarize(t.stat)
	}
}

// workBranch is the branch the data workloads write in.
const workBranch = "work"

func indexOf(bs []*scaleBackend, b *scaleBackend) int {
	for i, x := range bs {
		if x == b {
			return i
		}
	}
	return -1
}

// renderScaleOut prints the section's table: each figure for Badger and
// for etcd + S3, their ratio, and the target where there is one.
func renderScaleOut(x *scaleOutResult, p func(string, ...any), missed *[]string) {
	if len(x.Backends) < 2 {
		return
	}
	bad, eo := x.Backends[0], x.Backends[1]
	p("## 9. Scale-out backend: Badger beside etcd + S3 (one run)\n\n")
	p("etcd: %s. S3: %s. Store imported from %d files; every figure from servers running at the same time, runs interleaved. A cold read restarts the server and empties its block cache; Badger's cold read restarts it too, but the OS page cache still holds its files.\n\n", x.Etcd, x.S3, x.BaseFile)
	p("| figure | %s | %s | etcd + S3 / Badger (medians) | target | verdict |\n|---|---|---|---|---|---|\n", bad.Backend, eo.Backend)
	lat := func(name string, a, b stats.Summary, target float64) {
		t, v := "—", "—"
		if target > 0 {
			ok := b.N > 0 && b.Median < target
			t, v = "etcd + S3 p50 < "+us(target), verdict(ok)
			if !ok {
				*missed = append(*missed, fmt.Sprintf("scale-out: %s p50 on etcd + S3: %s (target < %s)", name, us(b.Median), us(target)))
			}
		}
		p("| %s p50 / p99 | %s | %s | %s | %s | %s |\n", name, p50p99(a), p50p99(b), ratio(b, a), t, v)
	}
	lat("fork", bad.Fork, eo.Fork, 10e3)
	lat("commit (one new 4 KiB file)", bad.Commit, eo.Commit, 10e3)
	lat("abort", bad.Abort, eo.Abort, 0)
	thr := func(name, unit string, a, b stats.Summary, within float64) {
		t, v := "—", "—"
		if within > 0 {
			ok := a.N > 0 && b.N > 0 && b.Median*within >= a.Median
			t, v = fmt.Sprintf("within %.0f× of Badger", within), verdict(ok)
			if !ok {
				*missed = append(*missed, fmt.Sprintf("scale-out: %s on etcd + S3: %s %s, Badger %s", name, num(b.Median), unit, num(a.Median)))
			}
		}
		p("| %s (%s) | %s | %s | %s | %s | %s |\n", name, unit, mmm(a), mmm(b), ratio(b, a), t, v)
	}
	thr("sequential write", "MiB/s", bad.SeqWrite, eo.SeqWrite, 0)
	thr("sequential read, warm cache", "MiB/s", bad.ReadWarm, eo.ReadWarm, 2)
	thr("sequential read, cold (server restarted, block cache emptied)", "MiB/s", bad.ReadCold, eo.ReadCold, 0)
	thr("small-file create, 1 KiB each", "files/s", bad.Create, eo.Create, 0)
	thr("stat (LOOKUP)", "files/s", bad.Stat, eo.Stat, 0)
	p("| server CPU per GiB of warm read (ms) | %s | %s | %s | — | — |\n", mmm(bad.ReadCPU), mmm(eo.ReadCPU), ratio(eo.ReadCPU, bad.ReadCPU))
	p("| etcd requests (Range and Txn calls) per READ of the warm read | — | %s | — | — | — |\n", mmm(eo.RequestsPerRead))
	for _, b := range x.Backends {
		if b.Error != "" {
			p("\n%s: %s\n", b.Backend, shorten(b.Error))
		}
	}
	p("\n")
}

// etcdRanges sums the Range and Txn calls the members served, from their
// Prometheus metrics on the client URL.
func etcdRanges(endpoints []string) (int64, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	var n int64
	for _, ep := range endpoints {
		resp, err := hc.Get(ep + "/metrics")
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		n += rangeCount(string(b))
	}
	return n, nil
}

// rangeCount reads grpc_server_handled_total for the KV service's Range
// and Txn methods (a read-only Txn reads several keys and ranges at once),
// every status code, from a Prometheus text exposition.
func rangeCount(metrics string) int64 {
	var n int64
	for _, l := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(l, "grpc_server_handled_total{") || !(strings.Contains(l, `grpc_method="Range"`) || strings.Contains(l, `grpc_method="Txn"`)) {
			continue
		}
		f := strings.Fields(l)
		var v float64
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			n += int64(v)
		}
	}
	return n
}

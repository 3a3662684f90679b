package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/branchnfs/branchnfs/bench/branchops"
	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/stats"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// suiteConfig holds the sizes of one run.
type suiteConfig struct {
	Quick       bool   `json:"quick"`
	Runs        int    `json:"runs"`
	SeqMiB      int    `json:"seq_mib"`
	ReqSize     int    `json:"req_size"`
	Conns       int    `json:"conns"`
	Depth       int    `json:"depth"`
	MetaFiles   int    `json:"meta_files"`
	MetaWorkers int    `json:"meta_workers"`
	Bases       []int  `json:"bases"`
	OpRuns      int    `json:"op_runs"`  // forks/aborts and small commits per base
	BigRuns     int    `json:"big_runs"` // 100 MB commits per base
	MaxCommit   int    `json:"max_commit_bytes"`
	Sections    string `json:"sections"`
	SoakRounds  int    `json:"soak_rounds,omitempty"`
	SoakEvery   int    `json:"soak_every,omitempty"`
	LatencyMiB  int    `json:"latency_mib,omitempty"`
	KernelTree  string `json:"kernel_tree,omitempty"` // under $(go env GOROOT)/src
	KernelRuns  int    `json:"kernel_runs,omitempty"`
	KernelSteps string `json:"kernel_steps,omitempty"` // comma-separated; empty: all
	Workspaces  int    `json:"workspaces,omitempty"`   // worktrees section
}

// Results is the JSON written to bench/results.
type Results struct {
	Date     string      `json:"date"`
	Commit   string      `json:"commit"`
	Host     string      `json:"host"`
	GoVer    string      `json:"go"`
	CPUs     int         `json:"cpus"`
	Config   suiteConfig `json:"config"`
	Duration float64     `json:"duration_seconds"`
	// LoadAvg is /proc/loadavg at the start and end: other processes on
	// the machine compete with the servers for its CPUs.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`

	BranchOpsInProcess []branchops.OpsResult               `json:"branch_ops_in_process,omitempty"`
	BranchOpsAPI       []apiOpsResult                      `json:"branch_ops_api,omitempty"`
	GoTestBench        map[string]map[string]stats.Summary `json:"go_test_bench,omitempty"` // benchmark -> unit -> summary
	Seq                []seqRow                            `json:"seq,omitempty"`
	Meta               []metaRow                           `json:"meta,omitempty"`
	Storage            []branchops.GrowthResult            `json:"storage,omitempty"`
	Memory             []memRow                            `json:"memory,omitempty"`
	Soak               []soakRow                           `json:"soak,omitempty"`
	Latency            []latencyRow                        `json:"latency,omitempty"`
	Kernel             *kernelResult                       `json:"kernel,omitempty"`
	ScaleOut           *scaleOutResult                     `json:"scale_out,omitempty"`
	Worktrees          *worktreeResult                     `json:"worktrees,omitempty"`
	Errors             []string                            `json:"errors,omitempty"`
	Notes              []string                            `json:"notes,omitempty"`
}

type seqRow struct {
	Server   string        `json:"server"`
	Client   string        `json:"client"`
	Write    stats.Summary `json:"write_mibps"`
	Read     stats.Summary `json:"read_mibps"`
	Verified int           `json:"verified_runs"`
	// ReadCPU is the server process's CPU time (user + system, all
	// threads) per GiB over the read phase, Go client rows only: unlike
	// MiB/s it hardly depends on what else runs on the machine.
	ReadCPU stats.Summary `json:"server_cpu_ms_per_gib_read"`
	// ClientCPU is the benchmark process's own CPU time per GiB over the
	// same phase, Go client rows only: what receiving the server's
	// replies cost the client, which competes with the server for the
	// machine's CPUs.
	ClientCPU stats.Summary `json:"client_cpu_ms_per_gib_read,omitzero"`
	// ClientSys is nfs-cp's own system CPU time over its read, in ms,
	// nfs-cp rows only. Most of it is the copy into the new file in
	// /dev/shm, and on a guest that hands freed memory back to its host
	// it varies from run to run by more than any server's share: the
	// slow reads are those where it is high, for every server alike.
	ClientSys stats.Summary `json:"client_sys_ms_read,omitzero"`
	Error     string        `json:"error,omitempty"`
}

type metaRow struct {
	Server string        `json:"server"`
	Create stats.Summary `json:"create_ops"`
	Stat   stats.Summary `json:"stat_ops"`
	List   stats.Summary `json:"list_entries_per_s"`
	Remove stats.Summary `json:"remove_ops"`
	// The server process's CPU time (user + system) per operation of
	// each phase, in microseconds (per entry for list): the figure the
	// machine's load moves least.
	CreateCPU stats.Summary `json:"create_cpu_us"`
	StatCPU   stats.Summary `json:"stat_cpu_us"`
	ListCPU   stats.Summary `json:"list_cpu_us"`
	RemoveCPU stats.Summary `json:"remove_cpu_us"`
	Error     string        `json:"error,omitempty"`
}

type memRow struct {
	Phase   string `json:"phase"`
	PeakRSS int64  `json:"peak_rss_bytes"` // VmHWM
	// At the end of the phase: resident anonymous memory (Go heap, ...)
	// and resident pages of mmapped files (Badger).
	RssAnon int64 `json:"rss_anon_end_bytes"`
	RssFile int64 `json:"rss_file_end_bytes"`
}

type apiOpsResult struct {
	BaseFiles int                      `json:"base_files"`
	ImportS   float64                  `json:"import_seconds"`
	Fork      stats.Summary            `json:"fork_us"`
	Abort     stats.Summary            `json:"abort_us"`
	Commit    map[string]stats.Summary `json:"commit_us"`
	CLIFork   stats.Summary            `json:"cli_fork_us"`
	Error     string                   `json:"error,omitempty"`
}

type suite struct {
	cfg      suiteConfig
	tmp      string
	bnfs     string // branchnfs binary ("" when unavailable)
	baseline string // an earlier branchnfs binary to compare with ("" for none)
	osnfs    string
	// etcdMember and versitygw run the scale-out section's etcd members
	// (internal/testbin/etcdmember) and S3 server.
	etcdMember, versitygw string
	res                   *Results
	log                   io.Writer
	sections              map[string]bool
	// back is the buffer every sequential read goes into (seq).
	back []byte
}

func (s *suite) logf(format string, a ...any) {
	fmt.Fprintf(s.log, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func (s *suite) fail(section string, err error) {
	msg := fmt.Sprintf("%s: %v", section, err)
	s.logf("ERROR %s", msg)
	s.res.Errors = append(s.res.Errors, msg)
}

func runSuite(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	quick := fs.Bool("quick", false, "small sizes, under 2 minutes")
	runs := fs.Int("runs", 5, "runs per throughput/metadata figure (median, min, max)")
	bnfs := fs.String("branchnfs", "", "branchnfs binary (empty: peers only)")
	baseline := fs.String("baseline", "", "a second branchnfs binary (an earlier build) measured beside the first in the seq, meta and kernel sections, as \"baseline branchnfs main\"")
	osnfs := fs.String("osnfs", "", "go-nfs example/osnfs binary")
	out := fs.String("out", "bench/results", "directory for the JSON (and Markdown) result")
	commit := fs.String("commit", "unknown", "commit id for the result name")
	sections := fs.String("sections", "", "comma-separated sections to run: branchops,storage,gotest,seq,meta,kernel,soak,latency,scaleout,worktrees (default all but soak, latency, scaleout and worktrees; --quick leaves out gotest)")
	keep := fs.Bool("keep", false, "keep the temporary directory")
	bases := fs.String("bases", "", "comma-separated base sizes (files) for branch operations (default 100,10000,100000; quick 100,1000)")
	soakRounds := fs.Int("soak", 0, "soak section: rounds of fork, write 4 KiB over NFS, commit every 4th else abort (alone, it runs only this section)")
	soakEvery := fs.Int("soak-every", 1000, "soak section: report every this many rounds")
	latency := fs.Bool("latency", false, "latency section: RPC latencies while heavy work runs (alone, it runs only this section)")
	latencyMiB := fs.Int("latency-mib", 1024, "latency section: size of the large branch merged and reclaimed (quick: 64)")
	kernelTree := fs.String("kernel-tree", "crypto", "kernel section: the tree under $(go env GOROOT)/src that the guest untars, reads, lists and removes (quick: net)")
	kernelRuns := fs.Int("kernel-runs", 4, "kernel section: runs per server, each server first in every other run (quick: 1)")
	kernelSteps := fs.String("kernel-steps", "", "kernel section: comma-separated steps timed in every run, of untar,read,lsR,rm (default all; without untar the tree is untarred once, untimed, e.g. --kernel-steps lsR --kernel-runs 20)")
	worktrees := fs.Int("worktrees", 0, "worktrees section: N workspaces by git worktree add + a copy of the ignored state, and by fork (alone, it runs only this section; default 8 in the section)")
	backend := fs.String("backend", "", "etcd+s3: the scale-out section, Badger beside metadata on a 3-member etcd and blocks in versitygw (alone, it runs only this section)")
	etcdMember := fs.String("etcdmember", "", "scale-out section: the internal/testbin/etcdmember binary")
	versitygw := fs.String("versitygw", "", "scale-out section: the versitygw binary")
	fs.Parse(args)
	if *soakRounds > 0 && *sections == "" {
		*sections = "soak"
	}
	if *latency && *sections == "" {
		*sections = "latency"
	}
	if *worktrees > 0 && *sections == "" {
		*sections = "worktrees"
	}
	switch *backend {
	case "":
	case "etcd+s3":
		if *sections == "" {
			*sections = "scaleout"
		}
	default:
		return fmt.Errorf("--backend %q: the one other backend is etcd+s3", *backend)
	}

	cfg := suiteConfig{Quick: *quick, Runs: *runs, SeqMiB: 256, ReqSize: 1 << 20, Conns: 4, Depth: 2,
		MetaFiles: 10000, MetaWorkers: 4, Bases: []int{100, 10000, 100000}, OpRuns: 50, BigRuns: 5,
		MaxCommit: 100e6, Sections: *sections, SoakRounds: *soakRounds, SoakEvery: max(1, *soakEvery), LatencyMiB: *latencyMiB,
		KernelTree: *kernelTree, KernelRuns: max(1, *kernelRuns), KernelSteps: *kernelSteps, Workspaces: *worktrees}
	if *quick && !flagSet(fs, "latency-mib") {
		cfg.LatencyMiB = 64
	}
	if *quick && !flagSet(fs, "kernel-tree") {
		cfg.KernelTree = "net"
	}
	if *quick && !flagSet(fs, "kernel-runs") {
		cfg.KernelRuns = 1
	}
	if *quick {
		cfg.SeqMiB, cfg.MetaFiles, cfg.Bases, cfg.OpRuns, cfg.BigRuns, cfg.MaxCommit = 16, 500, []int{100, 1000}, 20, 0, 1e6
	}
	if *bases != "" {
		cfg.Bases = nil
		for _, b := range strings.Split(*bases, ",") {
			var n int
			if _, err := fmt.Sscan(b, &n); err != nil {
				return fmt.Errorf("--bases: %w", err)
			}
			cfg.Bases = append(cfg.Bases, n)
		}
	}
	tmp, err := os.MkdirTemp("", "nfsb")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(tmp)
	}
	host, _ := os.Hostname()
	start := time.Now()
	s := &suite{cfg: cfg, tmp: tmp, bnfs: *bnfs, baseline: *baseline, osnfs: *osnfs, log: os.Stderr, sections: map[string]bool{},
		etcdMember: *etcdMember, versitygw: *versitygw,
		res: &Results{Date: start.UTC().Format(time.RFC3339), Commit: *commit, Host: host, GoVer: runtime.Version(), CPUs: runtime.NumCPU(), Config: cfg}}
	if *sections == "" {
		*sections = "branchops,storage,gotest,seq,meta,kernel"
		if *quick {
			*sections = "branchops,storage,seq,meta,kernel"
		}
		s.cfg.Sections, s.res.Config.Sections = *sections, *sections
	}
	for _, x := range strings.Split(*sections, ",") {
		s.sections[strings.TrimSpace(x)] = true
	}
	s.res.LoadStart = loadavg()
	s.logf("tmp %s; config %+v; load %s", tmp, cfg, s.res.LoadStart)
	ctx := context.Background()

	if s.sections["branchops"] || s.sections["storage"] {
		if ok, why := branchops.Available(ctx); !ok {
			s.fail("branches (in-process)", fmt.Errorf("not available: %s", why))
		} else {
			if s.sections["branchops"] {
				s.inProcessOps(ctx)
			}
			if s.sections["storage"] {
				s.storage(ctx)
			}
		}
	}
	if s.sections["gotest"] {
		s.goTestBench()
	}
	if s.sections["branchops"] && s.bnfs != "" {
		s.apiOps(ctx)
	}
	if s.sections["seq"] || s.sections["meta"] {
		s.nfsWorkloads()
	}
	if s.sections["kernel"] {
		s.kernel()
	}
	if s.sections["soak"] {
		if s.bnfs == "" {
			s.fail("soak", fmt.Errorf("needs --branchnfs"))
		} else {
			if s.cfg.SoakRounds <= 0 {
				s.cfg.SoakRounds, s.res.Config.SoakRounds = 10000, 10000
			}
			s.soak(ctx)
		}
	}
	if s.sections["latency"] {
		if s.bnfs == "" {
			s.fail("latency", fmt.Errorf("needs --branchnfs"))
		} else {
			s.latency(ctx)
		}
	}
	if s.sections["scaleout"] {
		s.scaleOut(ctx)
	}
	if s.sections["worktrees"] {
		if s.cfg.Workspaces <= 0 {
			s.cfg.Workspaces, s.res.Config.Workspaces = 8, 8
		}
		s.worktrees(ctx)
	}
	s.res.Duration = time.Since(start).Seconds()
	s.res.LoadEnd = loadavg()

	md := renderMarkdown(s.res)
	fmt.Print(md)
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		base := filepath.Join(*out, start.UTC().Format("2006-01-02")+"-"+*commit)
		if *quick {
			base += "-quick"
		}
		if s.cfg.Sections == "soak" || s.cfg.Sections == "latency" || s.cfg.Sections == "scaleout" || s.cfg.Sections == "worktrees" {
			base += "-" + s.cfg.Sections
		}
		b, _ := json.MarshalIndent(s.res, "", "  ")
		if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(base+".md", []byte(md), 0o644); err != nil {
			return err
		}
		s.logf("wrote %s.json and %s.md (%.0f s)", base, base, s.res.Duration)
	}
	return nil
}

// flagSet reports whether flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func (s *suite) inProcessOps(ctx context.Context) {
	for _, base := range s.cfg.Bases {
		dir := filepath.Join(s.tmp, fmt.Sprintf("inproc-%d", base))
		s.logf("in-process branch ops, base %d files", base)
		r, err := branchops.Ops(ctx, dir, base, s.cfg.OpRuns, s.cfg.OpRuns, s.cfg.BigRuns, s.cfg.MaxCommit)
		os.RemoveAll(dir)
		if err != nil {
			s.fail(fmt.Sprintf("in-process ops (base %d)", base), err)
			continue
		}
		s.res.BranchOpsInProcess = append(s.res.BranchOpsInProcess, r)
	}
}

func (s *suite) storage(ctx context.Context) {
	data := workload.Data(32, 32<<20)
	for _, w := range []string{"EDIT16", "Prepend", "PrependKept", "CHURN", "ABORTCHURN"} {
		dir := filepath.Join(s.tmp, "growth-"+w)
		s.logf("storage growth %s", w)
		r, err := branchops.Growth(ctx, dir, w, data)
		os.RemoveAll(dir)
		if err != nil {
			s.fail("storage "+w, err)
			continue
		}
		s.res.Storage = append(s.res.Storage, r)
	}
}

// goTestBench runs the in-process benchmarks of package branches, if
// there are any, and keeps the median ns/op of each.
func (s *suite) goTestBench() {
	list, err := exec.Command("go", "test", "-list", "^Benchmark", "./branches/").Output()
	if err != nil {
		s.fail("go test -list ./branches", err)
		return
	}
	var names []string
	for _, l := range strings.Split(string(list), "\n") {
		if strings.HasPrefix(l, "Benchmark") {
			names = append(names, l)
		}
	}
	if len(names) == 0 {
		s.res.Notes = append(s.res.Notes, "package branches has no Benchmark functions yet")
		return
	}
	count, bt := "5", "20x"
	s.logf("go test -bench in ./branches: %v", names)
	out, err := exec.Command("go", "test", "-run", "^$", "-bench", "Fork/files=(100|10000)$|Commit|Abort", "-benchtime", bt, "-count", count, "./branches/").CombinedOutput()
	if err != nil {
		s.fail("go test -bench ./branches", fmt.Errorf("%w: %s", err, tail2(string(out), 15)))
	}
	s.res.GoTestBench = parseBench(string(out))
}

func tail2(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// parseBench collects every metric (ns/op, p50-µs, ...) per benchmark name
// from go test -bench output.
func parseBench(out string) map[string]map[string]stats.Summary {
	vals := map[string]map[string][]float64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if j := strings.LastIndex(name, "-"); j > 0 {
			name = name[:j]
		}
		for i := 2; i+1 < len(f); i += 2 {
			var v float64
			if _, err := fmt.Sscan(f[i], &v); err != nil {
				break
			}
			if vals[name] == nil {
				vals[name] = map[string][]float64{}
			}
			vals[name][f[i+1]] = append(vals[name][f[i+1]], v)
		}
	}
	res := map[string]map[string]stats.Summary{}
	for k, m := range vals {
		res[k] = map[string]stats.Summary{}
		for unit, v := range m {
			res[k][unit] = stats.Summarize(v)
		}
	}
	return res
}

// makeTree writes n files of 100 bytes, 1,000 per directory, under dir.
func makeTree(dir string, n int) error {
	content := make([]byte, 100)
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%04d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		content[0], content[1], content[2] = byte(i), byte(i>>8), byte(i>>16)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%06d", i)), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// newStore creates a branchnfs store imported from a tree of base files.
func (s *suite) newStore(name string, base int) (string, float64, error) {
	return s.newStoreWith(s.bnfs, name, base)
}

// newStoreWith is newStore with the given branchnfs binary doing the
// import: a baseline build must open a store of its own format.
func (s *suite) newStoreWith(bin, name string, base int) (string, float64, error) {
	store := filepath.Join(s.tmp, name)
	src := filepath.Join(s.tmp, name+"-src")
	if err := makeTree(src, base); err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(src)
	t := time.Now()
	if _, err := branchnfsCLI(bin, "init", "--store", store, "--from", src); err != nil {
		return "", 0, err
	}
	return store, time.Since(t).Seconds(), nil
}

func (s *suite) recordMem(phase string, srv *server) {
	hwm, _, anon, file := srv.memory()
	if hwm > 0 {
		s.res.Memory = append(s.res.Memory, memRow{Phase: phase, PeakRSS: hwm, RssAnon: anon, RssFile: file})
	}
}

// apiOps times fork, abort and commit through the control API of a running
// server, and fork through the CLI (process start included).
func (s *suite) apiOps(ctx context.Context) {
	for _, base := range s.cfg.Bases {
		r := apiOpsResult{BaseFiles: base, Commit: map[string]stats.Summary{}}
		err := s.apiOpsBase(ctx, base, &r)
		if err != nil {
			r.Error = err.Error()
			s.fail(fmt.Sprintf("API ops (base %d)", base), err)
		}
		s.res.BranchOpsAPI = append(s.res.BranchOpsAPI, r)
	}
}

func (s *suite) apiOpsBase(ctx context.Context, base int, r *apiOpsResult) error {
	s.logf("API branch ops, base %d files", base)
	store, imp, err := s.newStore(fmt.Sprintf("api-%d", base), base)
	if err != nil {
		return err
	}
	defer os.RemoveAll(store)
	r.ImportS = imp
	srv, err := startBranchnfs(s.bnfs, store, filepath.Join(s.tmp, fmt.Sprintf("branchnfs-api-%d.log", base)))
	if err != nil {
		return err
	}
	defer srv.stop()
	defer s.recordMem(fmt.Sprintf("API branch ops, base %d", base), srv)
	c, _, err := control.Dial(ctx, control.SocketPath(store), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	n := s.cfg.OpRuns
	var forks, aborts []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		if _, err := c.Fork(ctx, "main", fmt.Sprintf("af%d", i)); err != nil {
			return fmt.Errorf("fork: %w", err)
		}
		forks = append(forks, time.Since(t))
	}
	for i := 0; i < n; i++ {
		t := time.Now()
		if _, err := c.Abort(ctx, fmt.Sprintf("af%d", i)); err != nil {
			return fmt.Errorf("abort: %w", err)
		}
		aborts = append(aborts, time.Since(t))
	}
	r.Fork, r.Abort = stats.Summarize(stats.Micros(forks)), stats.Summarize(stats.Micros(aborts))
	var cli []time.Duration
	for i := 0; i < min(n, 10); i++ {
		t := time.Now()
		if _, err := branchnfsCLI(s.bnfs, "fork", "--store", store, "main", fmt.Sprintf("cf%d", i)); err != nil {
			return err
		}
		cli = append(cli, time.Since(t))
		if _, err := c.Abort(ctx, fmt.Sprintf("cf%d", i)); err != nil {
			return err
		}
	}
	r.CLIFork = stats.Summarize(stats.Micros(cli))
	for _, cs := range branchops.CommitSizes {
		if cs.Bytes > s.cfg.MaxCommit {
			continue
		}
		runs := n
		if cs.Bytes >= 100e6 {
			runs = s.cfg.BigRuns
		}
		data := workload.Data(uint64(cs.Bytes), cs.Bytes)
		var ds []time.Duration
		for i := 0; i < runs; i++ {
			name := fmt.Sprintf("ac%s-%d", cs.Label, i)
			if _, err := c.Fork(ctx, "main", name); err != nil {
				return fmt.Errorf("fork: %w", err)
			}
			if err := nfsWrite(srv.target(name), name+".bin", data); err != nil {
				return fmt.Errorf("write %s over NFS: %w", name, err)
			}
			// nfsWrite's MNT is never followed by a UMNT, so the branch
			// counts as mounted: force the commit.
			t := time.Now()
			cr, err := c.ForceCommit(ctx, name)
			if err != nil {
				return fmt.Errorf("commit %s: %w", name, err)
			}
			ds = append(ds, time.Since(t))
			if !cr.FastPath {
				s.res.Notes = append(s.res.Notes, fmt.Sprintf("API commit %s (base %d) took the merge path", name, base))
			}
		}
		r.Commit[cs.Label] = stats.Summarize(stats.Micros(ds))
	}
	return nil
}

// nfsWrite writes data to a new file in an export's root (UNSTABLE 1 MiB
// writes, then COMMIT).
func nfsWrite(t nfsclient.Target, name string, data []byte) error {
	c, err := nfsclient.Dial(t)
	if err != nil {
		return err
	}
	defer c.Close()
	fh, err := c.Create(c.Root, name, 0o644)
	if err != nil {
		return err
	}
	req := min(1<<20, int(c.WTMax))
	for off := 0; off < len(data); off += req {
		if err := c.WriteFull(fh, uint64(off), data[off:min(off+req, len(data))], nfsclient.Unstable); err != nil {
			return err
		}
	}
	return c.Commit(fh)
}

// peer is one export under test.
type peer struct {
	label string
	srv   *server
	t     nfsclient.Target
	meta  bool // run the metadata workload here
}

func (s *suite) nfsWorkloads() {
	var peers []peer
	var stops []*server
	defer func() {
		for _, x := range stops {
			if err := x.stop(); err != nil {
				s.fail("stop "+x.kind, err)
			}
		}
	}()
	if s.bnfs != "" {
		if err := func() error {
			store, _, err := s.newStore("data", 100)
			if err != nil {
				return err
			}
			srv, err := startBranchnfs(s.bnfs, store, filepath.Join(s.tmp, "branchnfs-data.log"))
			if err != nil {
				return err
			}
			stops = append(stops, srv)
			peers = append(peers, peer{"branchnfs main", srv, srv.target("main"), true})
			// A file in main that the branch three levels deep reads
			// through its stack.
			if err := nfsWrite(srv.target("main"), "inherited.bin", workload.Data(1, s.cfg.SeqMiB<<20)); err != nil {
				return err
			}
			parent := "main"
			for _, b := range []string{"d1", "d2", "d3"} {
				if _, err := branchnfsCLI(s.bnfs, "fork", "--store", store, parent, b); err != nil {
					return err
				}
				parent = b
			}
			peers = append(peers, peer{inheritedPeer, srv, srv.target("d3"), false})
			return nil
		}(); err != nil {
			s.fail("branchnfs setup", err)
		}
	}
	if s.baseline != "" {
		if err := func() error {
			store, _, err := s.newStoreWith(s.baseline, "baseline", 100)
			if err != nil {
				return err
			}
			srv, err := startBranchnfs(s.baseline, store, filepath.Join(s.tmp, "branchnfs-baseline.log"))
			if err != nil {
				return err
			}
			stops = append(stops, srv)
			peers = append(peers, peer{"baseline branchnfs main", srv, srv.target("main"), true})
			return nil
		}(); err != nil {
			s.fail("baseline branchnfs setup", err)
		}
	}
	if g, err := startGanesha(s.tmp); err != nil {
		s.fail("ganesha setup", err)
	} else {
		stops = append(stops, g)
		peers = append(peers, peer{"nfs-ganesha (VFS)", g, g.target(""), true})
	}
	if s.osnfs != "" {
		if o, err := startOsnfs(s.tmp, s.osnfs); err != nil {
			s.fail("osnfs setup", err)
		} else {
			stops = append(stops, o)
			peers = append(peers, peer{"go-nfs osnfs", o, o.target(""), true})
		}
	}
	var bsrv, basesrv *server
	for _, p := range peers {
		if p.srv.kind == "branchnfs" && strings.HasPrefix(p.label, "branchnfs") {
			bsrv = p.srv
		}
		if p.srv.kind == "branchnfs" && strings.HasPrefix(p.label, "baseline") {
			basesrv = p.srv
		}
	}
	if s.sections["seq"] {
		s.seq(peers)
		if bsrv != nil {
			s.recordMem(fmt.Sprintf("sequential %d MiB write+read, main and depth 3", s.cfg.SeqMiB), bsrv)
			bsrv.resetPeak()
		}
		if basesrv != nil {
			s.recordMem(fmt.Sprintf("baseline: sequential %d MiB write+read, main", s.cfg.SeqMiB), basesrv)
			basesrv.resetPeak()
		}
	}
	if s.sections["meta"] {
		s.meta(peers)
		if bsrv != nil {
			s.recordMem(fmt.Sprintf("metadata, %d files", s.cfg.MetaFiles), bsrv)
		}
		if basesrv != nil {
			s.recordMem(fmt.Sprintf("baseline: metadata, %d files", s.cfg.MetaFiles), basesrv)
		}
	}
}

// seq runs the sequential workload with both clients against every peer.
// Runs are interleaved (run 1 on every peer, then run 2, ...) so that load
// from elsewhere on the machine spreads over all peers alike.
func (s *suite) seq(peers []peer) {
	size := s.cfg.SeqMiB << 20
	// Every write is of content no server holds yet: base (inherited.bin's
	// content) with a number of its own stamped into every 4 KiB. The
	// same bytes again would be found by branchnfs, which stores a block
	// once whatever writes it, and the write would measure that lookup.
	base := workload.Data(1, size)
	data := make([]byte, size)
	// One buffer for every read of the section, every server's alike
	// (SeqOptions.Back).
	s.back = workload.ReadBuffer(size)
	var salt uint64
	fresh := func() {
		salt++
		workload.Stamp(data, base, salt)
	}
	src := filepath.Join(shmDir(s.tmp), "nfsbench-src.bin")
	back := filepath.Join(shmDir(s.tmp), "nfsbench-back.bin")
	defer os.Remove(src)
	defer os.Remove(back)
	goClient := fmt.Sprintf("Go (%d KiB req, %d conns x %d in flight)", s.cfg.ReqSize>>10, s.cfg.Conns, s.cfg.Depth)
	type acc struct {
		row  seqRow
		w, r []float64
		cpu  []float64 // server CPU ms per GiB read
		self []float64 // the benchmark's own CPU ms per GiB read
		sys  []float64 // the libnfs tool's system CPU ms per read
	}
	accs := make([][3]*acc, len(peers))
	for i, p := range peers {
		accs[i] = [3]*acc{{row: seqRow{Server: p.label, Client: goClient}}, {row: seqRow{Server: p.label, Client: "nfs-cp (libnfs)"}},
			{row: seqRow{Server: p.label, Client: catClient}}}
	}
	mib := float64(size) / (1 << 20)
	// The read, through the branch three levels deep, of a file written in
	// main before the forks (every block resolves through the stack): one
	// run in each round, right after that branch's own, like every other
	// figure the ratios compare.
	inh := &acc{row: seqRow{Server: inheritedPeer + ", file inherited from main", Client: goClient}}
	// An untimed write and read first: the first read of the section, into
	// s.back, took 0.3 s more of the client's copy than any read after it
	// (perf, 2026-12-06), whatever the buffer held and though every page
	// was written right before it; that fell on the first peer's first run.
	if len(peers) > 0 {
		s.logf("seq warm-up on %s", peers[0].label)
		if _, err := workload.Seq(peers[0].t, base, workload.SeqOptions{Name: "warmup.bin", ReqSize: s.cfg.ReqSize,
			Conns: s.cfg.Conns, Depth: s.cfg.Depth, Back: s.back}); err != nil {
			s.logf("seq warm-up: %v", err)
		}
	}
	for run := 0; run < s.cfg.Runs; run++ {
		for i, p := range peers {
			if a := accs[i][0]; a.row.Error == "" {
				s.logf("seq %s go client run %d", p.label, run+1)
				fresh()
				var cpu0, cpu, self0, self float64
				res, err := workload.Seq(p.t, data, workload.SeqOptions{Name: "seq.bin", ReqSize: s.cfg.ReqSize, Conns: s.cfg.Conns, Depth: s.cfg.Depth, Back: s.back,
					BeforeRead: func() { cpu0, self0 = p.srv.cpuSeconds(), selfCPUSeconds() },
					AfterRead:  func() { cpu, self = p.srv.cpuSeconds()-cpu0, selfCPUSeconds()-self0 }})
				gib := float64(size) / (1 << 30)
				if err == nil && cpu0 > 0 {
					a.cpu = append(a.cpu, cpu*1000/gib)
				}
				if err == nil && self0 > 0 {
					a.self = append(a.self, self*1000/gib)
				}
				if err != nil {
					a.row.Error = err.Error()
					s.fail("seq go "+p.label, err)
				} else {
					a.w, a.r = append(a.w, res.WriteMiBps), append(a.r, res.ReadMiBps)
					a.row.Verified++
				}
			}
			if a := accs[i][1]; a.row.Error == "" {
				s.logf("seq %s nfs-cp run %d", p.label, run+1)
				fresh()
				want := sha256.Sum256(data)
				err := os.WriteFile(src, data, 0o644)
				var cp cpResult
				if err == nil {
					cp, err = s.nfsCp(p, fmt.Sprintf("cp%d.bin", run), src, back, want, data, accs[i][2].row.Error == "")
				}
				if err != nil {
					a.row.Error = err.Error()
					s.fail("seq nfs-cp "+p.label, err)
				} else {
					a.w, a.r = append(a.w, mib/cp.write.Seconds()), append(a.r, mib/cp.read.Seconds())
					a.sys = append(a.sys, float64(cp.sys.Milliseconds()))
					a.row.Verified++
				}
				if c := accs[i][2]; cp.catErr != nil {
					c.row.Error = cp.catErr.Error()
					s.fail("seq nfs-cat "+p.label, cp.catErr)
				} else if cp.cat > 0 {
					c.r = append(c.r, mib/cp.cat.Seconds())
					c.sys = append(c.sys, float64(cp.catSys.Milliseconds()))
					c.row.Verified++
				}
			}
			if p.label == inheritedPeer && inh.row.Error == "" {
				s.logf("seq %s inherited read run %d", p.label, run+1)
				v, err := workload.ReadExisting(p.t, "inherited.bin", base, workload.SeqOptions{ReqSize: s.cfg.ReqSize, Conns: s.cfg.Conns, Depth: s.cfg.Depth, Back: s.back})
				if err != nil {
					inh.row.Error = err.Error()
					s.fail("seq inherited "+p.label, err)
				} else {
					inh.r = append(inh.r, v)
					inh.row.Verified++
				}
			}
		}
	}
	for _, pa := range accs {
		for _, a := range pa {
			a.row.Write, a.row.Read, a.row.ReadCPU = stats.Summarize(a.w), stats.Summarize(a.r), stats.Summarize(a.cpu)
			a.row.ClientSys, a.row.ClientCPU = stats.Summarize(a.sys), stats.Summarize(a.self)
			s.res.Seq = append(s.res.Seq, a.row)
		}
	}
	if inh.row.Verified > 0 || inh.row.Error != "" { // the peer ran
		inh.row.Read = stats.Summarize(inh.r)
		s.res.Seq = append(s.res.Seq, inh.row)
	}
	if s.bnfs != "" {
		s.seqDirect(base)
	}
}

// seqDirect is the reference row: the same file through cowfs in-process,
// with no NFS in between.
func (s *suite) seqDirect(data []byte) {
	row := seqRow{Server: "branchnfs store in-process (no NFS)", Client: "cowfs WriteAt/ReadAt, 1 MiB"}
	var w, r []float64
	for run := 0; run < s.cfg.Runs; run++ {
		s.logf("seq in-process cowfs run %d", run+1)
		dir := filepath.Join(s.tmp, "direct")
		res, err := func() (res branchops.DirectResult, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return branchops.Direct(context.Background(), dir, data)
		}()
		os.RemoveAll(dir)
		if err != nil {
			row.Error = err.Error()
			s.fail("seq in-process", err)
			break
		}
		w, r = append(w, res.WriteMiBps), append(r, res.ReadMiBps)
		row.Verified++
	}
	row.Write, row.Read = stats.Summarize(w), stats.Summarize(r)
	s.res.Seq = append(s.res.Seq, row)
}

// inheritedPeer is the peer that also reads inherited.bin, the file main
// held before the forks.
const inheritedPeer = "branchnfs depth 3"

// catClient names the rows of nfs-cat's reads.
const catClient = "nfs-cat (libnfs), into a pipe"

// cpResult is one nfs-cp round trip and, when asked for, one nfs-cat read.
type cpResult struct {
	write, read time.Duration // nfs-cp's copy to the export and back
	sys         time.Duration // the reading nfs-cp's system CPU time
	cat, catSys time.Duration // nfs-cat's read and its system CPU time
	catErr      error
}

// nfsCp copies src to the export with nfs-cp and back, checks the digest of
// the copy, then (with cat) reads the file again with nfs-cat into a pipe
// whose other end compares it with data, and removes the remote file.
//
// nfs-cat reads as nfs-cp does, libnfs's synchronous 1 MiB preads, but
// writes what it reads to a pipe instead of to the pages of a new file in
// /dev/shm: its figure is the server's and libnfs's, not that of a copy
// whose cost depends on whether the machine's host took the memory back.
func (s *suite) nfsCp(p peer, name, src, back string, want [32]byte, data []byte, cat bool) (res cpResult, err error) {
	url := p.srv.url(p.t, name)
	t0 := time.Now()
	out, err := exec.Command("nfs-cp", src, url).CombinedOutput()
	res.write = time.Since(t0)
	if err == nil {
		// The last run's copy goes only now, right before the read that
		// writes this one: the read's client then writes into memory
		// freed a moment before. Freed two seconds earlier (the time
		// our write takes), the guest had handed that memory back to
		// its host, and nfs-cp's copy into the new file's pages took
		// 0.4 s of its 256 MiB read instead of 0.01 (perf, 2026-12-06):
		// a cost in the read figure that grew with the write's time.
		os.Remove(back)
		t0 = time.Now()
		var out2 []byte
		cmd := exec.Command("nfs-cp", url, back)
		out2, err = cmd.CombinedOutput()
		out = append(out, out2...)
		res.read = time.Since(t0)
		if cmd.ProcessState != nil {
			res.sys = cmd.ProcessState.SystemTime()
		}
	}
	if err != nil {
		return res, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	got, err := fileSHA(back)
	if err != nil || got != want {
		return res, fmt.Errorf("checksum mismatch after nfs-cp round trip (err %v)", err)
	}
	if cat {
		res.cat, res.catSys, res.catErr = nfsCat(url, data)
	}
	if c, err := nfsclient.Dial(p.t); err == nil {
		c.Remove(c.Root, name)
		c.Close()
	}
	return res, nil
}

// nfsCat reads url with nfs-cat into a pipe and checks every byte against
// want as it arrives. It returns the time from start to the last byte
// and nfs-cat's system CPU time.
func nfsCat(url string, want []byte) (d, sys time.Duration, err error) {
	cmd := exec.Command("nfs-cat", url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if f, ok := stdout.(*os.File); ok {
		growPipe(f) // fewer wake-ups of nfs-cat per 1 MiB it writes
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 1<<20)
	var off int
	var mismatch error
	for {
		n, rerr := stdout.Read(buf)
		if n > 0 && mismatch == nil {
			if off+n > len(want) || !bytes.Equal(buf[:n], want[off:off+n]) {
				mismatch = fmt.Errorf("nfs-cat: content differs within bytes %d-%d", off, off+n)
			}
		}
		off += n
		if rerr != nil {
			break
		}
	}
	werr := cmd.Wait()
	d = time.Since(t0)
	if cmd.ProcessState != nil {
		sys = cmd.ProcessState.SystemTime()
	}
	switch {
	case werr != nil:
		return 0, 0, fmt.Errorf("nfs-cat: %v: %s", werr, strings.TrimSpace(stderr.String()))
	case mismatch != nil:
		return 0, 0, mismatch
	case off != len(want):
		return 0, 0, fmt.Errorf("nfs-cat: read %d bytes, want %d", off, len(want))
	}
	return d, sys, nil
}

func shmDir(fallback string) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return fallback
}

func fileSHA(path string) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// meta runs the metadata workload, interleaving runs across peers.
func (s *suite) meta(peers []peer) {
	type acc struct {
		row                metaRow
		cr, st, ls, rm     []float64
		crc, stc, lsc, rmc []float64
	}
	var accs []*acc
	var ps []peer
	for _, p := range peers {
		if p.meta {
			accs, ps = append(accs, &acc{row: metaRow{Server: p.label}}), append(ps, p)
		}
	}
	for run := 0; run < s.cfg.Runs; run++ {
		for i, p := range ps {
			a := accs[i]
			if a.row.Error != "" {
				continue
			}
			s.logf("meta %s run %d", p.label, run+1)
			o := workload.MetaOptions{Dir: fmt.Sprintf("meta%d", run), Files: s.cfg.MetaFiles, FileSize: 1024, Workers: s.cfg.MetaWorkers}
			if p.srv != nil && p.srv.cpuSeconds() > 0 {
				o.CPU = p.srv.cpuSeconds
			}
			res, err := workload.Meta(p.t, o)
			if err != nil {
				a.row.Error = err.Error()
				s.fail("meta "+p.label, err)
				continue
			}
			a.cr, a.st, a.ls, a.rm = append(a.cr, res.CreateOps), append(a.st, res.StatOps), append(a.ls, res.ListOps), append(a.rm, res.RemoveOps)
			if o.CPU != nil {
				a.crc, a.stc, a.lsc, a.rmc = append(a.crc, res.CreateCPU), append(a.stc, res.StatCPU), append(a.lsc, res.ListCPU), append(a.rmc, res.RemoveCPU)
			}
		}
	}
	for _, a := range accs {
		a.row.Create, a.row.Stat, a.row.List, a.row.Remove = stats.Summarize(a.cr), stats.Summarize(a.st), stats.Summarize(a.ls), stats.Summarize(a.rm)
		a.row.CreateCPU, a.row.StatCPU, a.row.ListCPU, a.row.RemoveCPU = stats.Summarize(a.crc), stats.Summarize(a.stc), stats.Summarize(a.lsc), stats.Summarize(a.rmc)
		s.res.Meta = append(s.res.Meta, a.row)
	}
}

// loadavg returns the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/branchnfs/branchnfs/bench/stats"
)

// The kernel section: a real source tree through the Linux kernel NFSv3
// client, in the qemu guest of tests/kernel (BenchmarkKernelTree), against
// branchnfs and nfs-ganesha started here, both mounted by the same guest
// in the same boot, runs interleaved.

// kernelResult is the section's JSON.
type kernelResult struct {
	Tree struct {
		Source string `json:"source"`
		Files  int    `json:"files"`
		Dirs   int    `json:"dirs"`
		Bytes  int64  `json:"bytes"`
	} `json:"tree"`
	BootSeconds float64     `json:"boot_seconds"`
	Rows        []kernelRow `json:"rows"`
	// Samples are the guest's per-run step times as the benchmark wrote them.
	Samples []kernelSample `json:"samples"`
	Error   string         `json:"error,omitempty"`
}

// kernelRow is one server's time for one step, in seconds.
type kernelRow struct {
	Server  string        `json:"server"`
	Step    string        `json:"step"`
	Seconds stats.Summary `json:"seconds"`
}

type kernelSample struct {
	Server  string  `json:"server"`
	Run     int     `json:"run"`
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
	// Procs are branchnfs's calls per procedure during the step.
	Procs map[string]uint64 `json:"procs,omitempty"`
	// ServerMicros is branchnfs's time in each procedure during the step.
	ServerMicros map[string]uint64 `json:"server_us,omitempty"`
	// Client is the guest's kernel client's per-op statistics of the
	// mount during the step (/proc/self/mountstats), for every server.
	Client map[string]clientOp `json:"client,omitempty"`
	// Events are the client's event and byte counters of the mount that
	// changed during the step (mountstats "events:" and "bytes:").
	Events map[string]uint64 `json:"client_events,omitempty"`
	// CPU is the CPU time in seconds used during the step by each server
	// (by name), qemu ("qemu") and all host CPUs ("host"); CPUBefore the
	// same over the untimed sync and drop_caches before it.
	CPU       map[string]float64 `json:"cpu,omitempty"`
	CPUBefore map[string]float64 `json:"cpu_before,omitempty"`
}

// clientOp is one operation's per-op statistics over a step; times are
// the kernel's sums in milliseconds.
type clientOp struct {
	Ops       uint64 `json:"ops"`
	Trans     uint64 `json:"trans"`
	BytesSent uint64 `json:"bytes_sent"`
	BytesRecv uint64 `json:"bytes_recv"`
	QueueMs   uint64 `json:"queue_ms"`
	RTTMs     uint64 `json:"rtt_ms"`
	ExecMs    uint64 `json:"exec_ms"`
}

// kernelSteps are the benchmark's timed steps, in order, with what each
// does in the guest.
var kernelSteps = []struct{ name, what string }{
	{"untar", "tar xf of the tree into the mount, then sync"},
	{"read", "sha256sum -c of every file"},
	{"lsR", "ls -lR of the tree"},
	{"rm", "rm -rf of the tree"},
}

func (s *suite) kernel() {
	res := &kernelResult{}
	s.res.Kernel = res
	if err := s.kernelRun(res); err != nil {
		res.Error = err.Error()
		s.fail("kernel", err)
	}
}

func (s *suite) kernelRun(res *kernelResult) error {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return fmt.Errorf("qemu-system-x86_64 not found (Debian: apt-get install -y --no-install-recommends qemu-system-x86)")
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	tree := filepath.Join(strings.TrimSpace(string(goroot)), "src", s.cfg.KernelTree)
	dir := filepath.Join(s.tmp, "kernel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var servers []map[string]any
	if s.bnfs != "" {
		store, _, err := s.newStore("kernel-store", 100)
		if err != nil {
			return err
		}
		srv, err := startBranchnfs(s.bnfs, store, filepath.Join(dir, "branchnfs.log"))
		if err != nil {
			return err
		}
		defer srv.stop()
		defer s.recordMem(fmt.Sprintf("kernel client, %s tree", s.cfg.KernelTree), srv)
		servers = append(servers, map[string]any{"name": "branchnfs", "nfs_port": srv.nfsPort, "mount_port": srv.mountPort, "export": "/main", "store": store, "pid": srv.cmd.Process.Pid})
	}
	if s.baseline != "" {
		store, _, err := s.newStoreWith(s.baseline, "kernel-baseline-store", 100)
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		srv, err := startBranchnfs(s.baseline, store, filepath.Join(dir, "baseline.log"))
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		defer srv.stop()
		servers = append(servers, map[string]any{"name": "baseline", "nfs_port": srv.nfsPort, "mount_port": srv.mountPort, "export": "/main", "store": store, "pid": srv.cmd.Process.Pid})
	}
	g, err := startGanesha(dir)
	if err != nil {
		return fmt.Errorf("ganesha: %w", err)
	}
	defer g.stop()
	servers = append(servers, map[string]any{"name": "ganesha", "nfs_port": g.nfsPort, "mount_port": g.mountPort, "export": g.root, "pid": g.cmd.Process.Pid})

	out := filepath.Join(dir, "result.json")
	var steps []string
	if s.cfg.KernelSteps != "" {
		for _, x := range strings.Split(s.cfg.KernelSteps, ",") {
			steps = append(steps, strings.TrimSpace(x))
		}
	}
	cfg, _ := json.Marshal(map[string]any{"servers": servers, "tree_dir": tree, "runs": s.cfg.KernelRuns, "steps": steps, "out": out})
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	s.logf("kernel client: %s, %d runs on %d servers (qemu TCG guest), steps %v", tree, s.cfg.KernelRuns, len(servers), steps)
	cmd := exec.Command("go", "test", "-count=1", "-run", "^$", "-bench", "^BenchmarkKernelTree$", "-benchtime", "1x", "-timeout", "60m", "./tests/kernel/")
	cmd.Env = append(os.Environ(), "BRANCHNFS_KERNEL_BENCH="+cfgPath)
	log, err := cmd.CombinedOutput()
	os.WriteFile(filepath.Join(dir, "go-test.log"), log, 0o644)
	data, rerr := os.ReadFile(out)
	if rerr != nil {
		if err == nil {
			err = rerr
		}
		return fmt.Errorf("BenchmarkKernelTree: %v: %s", err, tail2(string(log), 20))
	}
	if err := json.Unmarshal(data, res); err != nil {
		return err
	}
	res.Rows = kernelRows(res.Samples)
	if err != nil {
		return fmt.Errorf("BenchmarkKernelTree: %v: %s", err, tail2(string(log), 20))
	}
	return nil
}

// kernelRows summarises the samples per server and step, in step order.
func kernelRows(samples []kernelSample) []kernelRow {
	var rows []kernelRow
	var servers []string
	for _, x := range samples {
		if !contains(servers, x.Server) {
			servers = append(servers, x.Server)
		}
	}
	for _, st := range kernelSteps {
		timed := false
		for _, x := range samples {
			timed = timed || x.Step == st.name
		}
		if !timed {
			continue // not one of the run's steps (--kernel-steps)
		}
		for _, srv := range servers {
			var v []float64
			for _, x := range samples {
				if x.Server == srv && x.Step == st.name && x.Error == "" {
					v = append(v, x.Seconds)
				}
			}
			rows = append(rows, kernelRow{Server: srv, Step: st.name, Seconds: stats.Summarize(v)})
		}
	}
	return rows
}

// pairedRatio is the median over runs of a's time over b's for step, each
// run's pair measured minutes apart at most in one boot: less moved by a
// slow stretch of the machine than the ratio of the medians.
func pairedRatio(samples []kernelSample, a, b, step string) (stats.Summary, bool) {
	byRun := map[int]map[string]float64{}
	for _, x := range samples {
		if x.Step == step && x.Error == "" && (x.Server == a || x.Server == b) {
			if byRun[x.Run] == nil {
				byRun[x.Run] = map[string]float64{}
			}
			byRun[x.Run][x.Server] = x.Seconds
		}
	}
	var v []float64
	for _, m := range byRun {
		if xa, xb := m[a], m[b]; xa > 0 && xb > 0 {
			v = append(v, xa/xb)
		}
	}
	if len(v) == 0 {
		return stats.Summary{}, false
	}
	return stats.Summarize(v), true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// renderKernel prints the section's table: seconds per step (lower is
// better) and ganesha's time over branchnfs's (above 1 means branchnfs is
// faster), and adds the steps where branchnfs is slower to missed.
func renderKernel(r *Results, p func(string, ...any), missed *[]string) {
	k := r.Kernel
	p("## 8. A source tree through the Linux kernel client (qemu TCG guest; seconds)\n\n")
	if k.Tree.Files > 0 {
		p("Tree: `%s` (%d files, %d directories, %.1f MiB), packed into a tarball at run time; guest boot %.1f s; %d runs per figure, servers interleaved in one boot, each first in its share of the runs; every step starts with the guest's caches dropped.\n\n",
			k.Tree.Source, k.Tree.Files, k.Tree.Dirs, float64(k.Tree.Bytes)/(1<<20), k.BootSeconds, r.Config.KernelRuns)
	}
	if r.Config.KernelSteps != "" {
		p("Steps timed: %s; without untar, the tree is untarred once per server before the runs, untimed, and every run works on that copy.\n\n", r.Config.KernelSteps)
	}
	withBase := false
	for _, x := range k.Rows {
		withBase = withBase || x.Server == "baseline"
	}
	if withBase {
		p("| step | what the guest runs | branchnfs main | baseline branchnfs main | nfs-ganesha (VFS) | vs ganesha (ganesha's time / ours) | per-run ratio vs ganesha, median (min–max) | vs baseline (its time / ours) | per-run ratio vs baseline |\n|---|---|---|---|---|---|---|---|---|\n")
	} else {
		p("| step | what the guest runs | branchnfs main | nfs-ganesha (VFS) | vs ganesha (ganesha's time / ours) | per-run ratio vs ganesha, median (min–max) |\n|---|---|---|---|---|---|\n")
	}
	paired := func(a, b, step string) string {
		r, ok := pairedRatio(k.Samples, a, b, step)
		if !ok {
			return "—"
		}
		return fmt.Sprintf("%.2f× (%.2f–%.2f)", r.Median, r.Min, r.Max)
	}
	find := func(server, step string) stats.Summary {
		for _, x := range k.Rows {
			if x.Server == server && x.Step == step {
				return x.Seconds
			}
		}
		return stats.Summary{}
	}
	sec := func(s stats.Summary) string {
		if s.N == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Median, s.Min, s.Max)
	}
	for _, st := range kernelSteps {
		b, g := find("branchnfs", st.name), find("ganesha", st.name)
		if b.N == 0 && g.N == 0 {
			continue // not timed in this run (--kernel-steps)
		}
		if withBase {
			base := find("baseline", st.name)
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st.name, st.what, sec(b), sec(base), sec(g), ratio(g, b),
				paired("ganesha", "branchnfs", st.name), ratio(base, b), paired("baseline", "branchnfs", st.name))
		} else {
			p("| %s | %s | %s | %s | %s | %s |\n", st.name, st.what, sec(b), sec(g), ratio(g, b), paired("ganesha", "branchnfs", st.name))
		}
		if b.N > 0 && g.N > 0 && b.Median > g.Median {
			*missed = append(*missed, fmt.Sprintf("kernel client %s: %.2f s vs ganesha %.2f s (%s)", st.name, b.Median, g.Median, ratio(g, b)))
		}
	}
	for _, x := range k.Samples {
		if x.Server == "branchnfs" && x.Run == 1 && len(x.Procs) > 0 {
			p("\nbranchnfs's calls per procedure, run 1 (counted by the server):\n\n")
			break
		}
	}
	for _, x := range k.Samples {
		if x.Server == "branchnfs" && x.Run == 1 && len(x.Procs) > 0 {
			p("- %s: %s\n", x.Step, formatProcs(x.Procs))
		}
	}
	renderKernelCPU(k, p)
	renderKernelClient(k, p)
	renderKernelEvents(k, p)
	if k.Error != "" {
		p("\nerror: %s\n", shorten(k.Error))
	}
	p("\n")
}

// firstRun returns server's sample of step in run 1, nil if there is none.
func (k *kernelResult) firstRun(server, step string) *kernelSample {
	for i, x := range k.Samples {
		if x.Server == server && x.Step == step && x.Run == 1 {
			return &k.Samples[i]
		}
	}
	return nil
}

// renderKernelClient prints, per step of run 1, what the guest's client
// counted per operation for branchnfs and ganesha side by side, and
// branchnfs's own time per call.
func renderKernelClient(k *kernelResult, p func(string, ...any)) {
	header := false
	for _, st := range kernelSteps {
		b, g := k.firstRun("branchnfs", st.name), k.firstRun("ganesha", st.name)
		var ops []string
		for _, x := range []*kernelSample{b, g} {
			if x == nil {
				continue
			}
			for op := range x.Client {
				if !contains(ops, op) {
					ops = append(ops, op)
				}
			}
		}
		if len(ops) == 0 {
			continue
		}
		if !header {
			p("\nPer operation, run 1, as the guest's client counted it (/proc/self/mountstats; branchnfs / ganesha): calls, average reply size, average RTT (request sent to reply received) and execute time (call start to end) in ms; and branchnfs's own time per call (µs, from arguments decoded to reply encoded):\n\n")
			p("| step | operation | calls | reply bytes | RTT ms | execute ms | branchnfs µs/call |\n|---|---|---|---|---|---|---|\n")
			header = true
		}
		calls := func(x *kernelSample, op string) uint64 {
			if x == nil {
				return 0
			}
			return x.Client[op].Ops
		}
		sort.Slice(ops, func(i, j int) bool {
			ci, cj := calls(b, ops[i])+calls(g, ops[i]), calls(b, ops[j])+calls(g, ops[j])
			if ci != cj {
				return ci > cj
			}
			return ops[i] < ops[j]
		})
		for _, op := range ops {
			cell := func(f func(o clientOp) string) string {
				var parts [2]string
				for i, x := range []*kernelSample{b, g} {
					parts[i] = "—"
					if x != nil {
						if o, ok := x.Client[op]; ok && o.Ops > 0 {
							parts[i] = f(o)
						}
					}
				}
				return parts[0] + " / " + parts[1]
			}
			srv := "—"
			if b != nil && b.Procs["nfs."+op] > 0 {
				srv = fmt.Sprintf("%.0f", float64(b.ServerMicros["nfs."+op])/float64(b.Procs["nfs."+op]))
			}
			p("| %s | %s | %s | %s | %s | %s | %s |\n", st.name, op,
				cell(func(o clientOp) string { return fmt.Sprint(o.Ops) }),
				cell(func(o clientOp) string { return fmt.Sprint(o.BytesRecv / o.Ops) }),
				cell(func(o clientOp) string { return fmt.Sprintf("%.2f", float64(o.RTTMs)/float64(o.Ops)) }),
				cell(func(o clientOp) string { return fmt.Sprintf("%.2f", float64(o.ExecMs)/float64(o.Ops)) }),
				srv)
		}
	}
}

// formatProcs prints calls per procedure, most frequent first.
func formatProcs(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	var total uint64
	for k, v := range m {
		keys = append(keys, k)
		total += v
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", strings.TrimPrefix(k, "nfs."), m[k])
	}
	return fmt.Sprintf("%d calls (%s)", total, strings.Join(parts, ", "))
}

// renderKernelCPU prints, per step, the CPU time (median over the runs,
// in seconds) the servers, qemu and the host used while the guest ran
// the step on each server (in the samples' order: branchnfs, the
// baseline if any, ganesha): the guest is an emulator on the same two
// cores, so a server that works in the background slows every program
// in the guest.
func renderKernelCPU(k *kernelResult, p func(string, ...any)) {
	var servers []string
	have := false
	for _, x := range k.Samples {
		if !contains(servers, x.Server) {
			servers = append(servers, x.Server)
		}
		have = have || len(x.CPU) > 0
	}
	if !have || len(servers) < 2 {
		return
	}
	med := func(server, step string, f func(x kernelSample) (float64, bool)) string {
		var v []float64
		for _, x := range k.Samples {
			if x.Server == server && x.Step == step && x.Error == "" {
				if y, ok := f(x); ok {
					v = append(v, y)
				}
			}
		}
		if len(v) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", stats.Summarize(v).Median)
	}
	cpu := func(m func(x kernelSample) map[string]float64, name string) func(x kernelSample) (float64, bool) {
		return func(x kernelSample) (float64, bool) {
			v, ok := m(x)[name]
			return v, ok
		}
	}
	during := func(x kernelSample) map[string]float64 { return x.CPU }
	before := func(x kernelSample) map[string]float64 { return x.CPUBefore }
	// idle is the CPU the servers other than the serving one used.
	idle := func(serving string) func(x kernelSample) (float64, bool) {
		return func(x kernelSample) (float64, bool) {
			var sum float64
			ok := false
			for _, n := range servers {
				if v, has := x.CPU[n]; has && n != serving {
					sum, ok = sum+v, true
				}
			}
			return sum, ok
		}
	}
	// rest is the host's busy time that neither qemu nor a server used:
	// the benchmark's own processes, the host kernel's threads, anything
	// else running.
	rest := func(x kernelSample) (float64, bool) {
		h, ok := x.CPU["host"]
		if !ok {
			return 0, false
		}
		for _, n := range append([]string{"qemu"}, servers...) {
			h -= x.CPU[n]
		}
		return h, true
	}
	all := func(step string, f func(string) func(x kernelSample) (float64, bool)) string {
		parts := make([]string, len(servers))
		for i, srv := range servers {
			parts[i] = med(srv, step, f(srv))
		}
		return strings.Join(parts, " / ")
	}
	idleWhat := "the idle one's"
	if len(servers) > 2 {
		idleWhat = "the idle ones' together"
	}
	p("\nCPU time during each step, measured on the host (seconds, median over the runs; %s): the serving server's and %s, qemu's (the whole guest), its vCPU thread's and the time that thread was ready to run but waited for a host CPU, and the rest of the host's busy time (all CPUs, less qemu and the servers); then the serving server's in the untimed sync and drop_caches before the step:\n\n", strings.Join(servers, " / "), idleWhat)
	p("| step | serving server | idle server | qemu | qemu vCPU thread | vCPU waiting for a CPU | rest of host | serving server before the step |\n|---|---|---|---|---|---|---|---|\n")
	for _, st := range kernelSteps {
		timed := false
		for _, srv := range servers {
			timed = timed || k.firstRun(srv, st.name) != nil
		}
		if !timed {
			continue // not timed in this run (--kernel-steps)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", st.name,
			all(st.name, func(srv string) func(x kernelSample) (float64, bool) { return cpu(during, srv) }),
			all(st.name, idle),
			all(st.name, func(string) func(x kernelSample) (float64, bool) { return cpu(during, "qemu") }),
			all(st.name, func(string) func(x kernelSample) (float64, bool) { return cpu(during, "qemu/CPU 0/TCG") }),
			all(st.name, func(string) func(x kernelSample) (float64, bool) { return cpu(during, "qemu-wait/CPU 0/TCG") }),
			all(st.name, func(string) func(x kernelSample) (float64, bool) { return rest }),
			all(st.name, func(srv string) func(x kernelSample) (float64, bool) { return cpu(before, srv) }))
	}
}

// renderKernelEvents prints, per step of run 1, the guest client's event
// counters that differ between the servers (mountstats "events:" and
// "bytes:"): cache revalidations and invalidations, VFS calls, pages.
func renderKernelEvents(k *kernelResult, p func(string, ...any)) {
	header := false
	for _, st := range kernelSteps {
		b, g := k.firstRun("branchnfs", st.name), k.firstRun("ganesha", st.name)
		if b == nil || g == nil {
			continue
		}
		var names []string
		for _, m := range []map[string]uint64{b.Events, g.Events} {
			for n := range m {
				if !contains(names, n) && b.Events[n] != g.Events[n] {
					names = append(names, n)
				}
			}
		}
		if len(names) == 0 {
			continue
		}
		sort.Strings(names)
		if !header {
			p("\nThe guest client's event counters that differ, run 1 (/proc/self/mountstats events and bytes; and the whole guest's CPU ticks, interrupts, context switches and TCP segments as guest_* and tcp_*; branchnfs / ganesha):\n\n")
			header = true
		}
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s %d / %d", n, b.Events[n], g.Events[n])
		}
		p("- %s: %s\n", st.name, strings.Join(parts, ", "))
	}
}

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
		servers = append(servers, map[string]any{"name": "branchnfs", "nfs_port": srv.nfsPort, "mount_port": srv.mountPort, "export": "/main", "store": store})
	}
	g, err := startGanesha(dir)
	if err != nil {
		return fmt.Errorf("ganesha: %w", err)
	}
	defer g.stop()
	servers = append(servers, map[string]any{"name": "ganesha", "nfs_port": g.nfsPort, "mount_port": g.mountPort, "export": g.root})

	out := filepath.Join(dir, "result.json")
	cfg, _ := json.Marshal(map[string]any{"servers": servers, "tree_dir": tree, "runs": s.cfg.KernelRuns, "out": out})
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	s.logf("kernel client: %s, %d runs on %d servers (qemu TCG guest)", tree, s.cfg.KernelRuns, len(servers))
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
		p("Tree: `%s` (%d files, %d directories, %.1f MiB), packed into a tarball at run time; guest boot %.1f s; %d runs per figure, servers interleaved in one boot; every step starts with the guest's caches dropped.\n\n",
			k.Tree.Source, k.Tree.Files, k.Tree.Dirs, float64(k.Tree.Bytes)/(1<<20), k.BootSeconds, r.Config.KernelRuns)
	}
	p("| step | what the guest runs | branchnfs main | nfs-ganesha (VFS) | vs ganesha (ganesha's time / ours) |\n|---|---|---|---|---|\n")
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
		p("| %s | %s | %s | %s | %s |\n", st.name, st.what, sec(b), sec(g), ratio(g, b))
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
	if k.Error != "" {
		p("\nerror: %s\n", shorten(k.Error))
	}
	p("\n")
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

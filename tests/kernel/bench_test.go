package kernel

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// BenchmarkKernelTree times a real source tree through the guest's kernel
// NFSv3 client: untar it into the export, read every file back after
// dropping the guest's caches (each checked against its SHA-256), ls -lR,
// rm -rf. Every timed step starts with cold guest caches (drop_caches is a
// step of its own, not timed). One boot serves all servers and runs, which
// are interleaved (run 1 on every server, then run 2, ...) so that load
// elsewhere on the machine spreads over all of them, and every other run
// visits the servers in reverse order (runOrder).
//
// scripts/bench (section kernel) runs it against branchnfs and nfs-ganesha,
// started by nfsbench, with $BRANCHNFS_KERNEL_BENCH naming a JSON file of
// kernelBenchConfig. Without it, the benchmark starts a fresh branchnfs
// itself and untars $(go env GOROOT)/src/net into branch main:
//
//	go test ./tests/kernel/ -run '^$' -bench KernelTree -benchtime 1x
func BenchmarkKernelTree(b *testing.B) {
	cfg := kernelBenchConfig{Runs: 1}
	if p := os.Getenv("BRANCHNFS_KERNEL_BENCH"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			b.Fatalf("%s: %v", p, err)
		}
	}
	var img *guestImage
	var helper string
	if len(cfg.Servers) == 0 {
		var srv *nfsServer
		img, helper, srv = setup(b)
		cfg.Servers = []benchServer{{Name: "branchnfs", NFSPort: srv.port, MountPort: srv.port, Export: srv.exportPath("main"), Store: srv.store}}
	} else {
		img, helper = guestPrerequisites(b)
	}
	if cfg.TreeDir == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			b.Fatalf("go env GOROOT: %v", err)
		}
		cfg.TreeDir = filepath.Join(strings.TrimSpace(string(out)), "src", "net")
	}
	dir := b.TempDir()
	tree, err := packTree(cfg.TreeDir, filepath.Join(dir, "tree.tar"), filepath.Join(dir, "sums.txt"))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("tree %s: %d files, %d directories, %d bytes", cfg.TreeDir, tree.Files, tree.Dirs, tree.Bytes)
	steps, err := cfg.timedSteps()
	if err != nil {
		b.Fatal(err)
	}
	script := kernelBenchScript(cfg, tree)
	procs := newProcCounter(cfg.Servers)
	client := newClientCounter()
	watch := map[string]int{}
	for _, s := range cfg.Servers {
		if s.PID > 0 {
			watch[s.Name] = s.PID
		}
	}
	b.ResetTimer()
	res := bootGuest(b, img, helper, script, map[string]string{}, map[string]hostAction{"procs": procs.snapshot, "mstats": client.snapshot}, watch, 60*time.Minute,
		guestFile{Path: "tree.tar", Src: filepath.Join(dir, "tree.tar")}, guestFile{Path: "sums.txt", Src: filepath.Join(dir, "sums.txt")})
	b.StopTimer()
	out := kernelBenchResult{Tree: tree, Boot: res.boot.Seconds()}
	if res.err != nil {
		out.Error = res.err.Error()
	}
	perStep := map[string][]float64{}
	var counted []string
	for r := 1; r <= cfg.Runs; r++ {
		for _, s := range cfg.Servers {
			for i, step := range steps {
				name := fmt.Sprintf("r%d_%s_%s", r, s.Name, step)
				smp := kernelBenchSample{Server: s.Name, Run: r, Step: step}
				smp.Procs, smp.ServerMicros = procs.step(s.Name, (r-1)*len(steps)+i)
				if len(smp.Procs) > 0 {
					counted = append(counted, name+": "+formatProcs(smp.Procs))
				}
				smp.Client, smp.Events = client.step(s.Name, (r-1)*len(steps)+i)
				if len(smp.Client) > 0 {
					counted = append(counted, name+" (client): "+formatClient(smp.Client))
				}
				smp.CPU, smp.CPUBefore = stepCPU(res, name)
				switch st := res.steps[name]; {
				case st == nil:
					smp.Error = "step not reported by the guest"
				case !st.pass:
					smp.Error = st.detail
				default:
					smp.Seconds = st.took.Seconds()
					perStep[s.Name+" "+step] = append(perStep[s.Name+" "+step], smp.Seconds)
				}
				if smp.Error != "" {
					b.Errorf("%s: %s", name, smp.Error)
				}
				out.Samples = append(out.Samples, smp)
			}
		}
	}
	if len(counted) > 0 {
		b.Logf("calls per procedure: %s", strings.Join(counted, "; "))
	}
	for k, v := range perStep {
		var sum float64
		for _, x := range v {
			sum += x
		}
		b.ReportMetric(sum/float64(len(v)), strings.ReplaceAll(k, " ", "-")+"-s")
	}
	if b.Failed() {
		b.Logf("guest console (end):\n%s", res.consoleTail(40))
	}
	if cfg.Out != "" {
		data, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(cfg.Out, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// kernelBenchConfig is what scripts/bench hands the benchmark.
type kernelBenchConfig struct {
	Servers []benchServer `json:"servers"`
	TreeDir string        `json:"tree_dir"` // packed into a tarball at run time
	Runs    int           `json:"runs"`
	// Steps are the steps timed in every run, a subset of
	// kernelBenchSteps (empty: all). Without untar, the tree is untarred
	// once per server before the runs, untimed, and every run works on
	// that copy; rm then cannot be timed (the next run would find no
	// tree). Timing only lsR many times measures it alone.
	Steps []string `json:"steps,omitempty"`
	Out   string   `json:"out"` // where the kernelBenchResult goes
}

// timedSteps returns the steps timed in every run, in kernelBenchSteps'
// order, or why cfg.Steps cannot be run.
func (cfg kernelBenchConfig) timedSteps() ([]string, error) {
	if len(cfg.Steps) == 0 {
		return kernelBenchSteps, nil
	}
	for _, s := range cfg.Steps {
		if !contains(kernelBenchSteps, s) {
			return nil, fmt.Errorf("kernel bench: unknown step %q (steps are %s)", s, strings.Join(kernelBenchSteps, ", "))
		}
	}
	var out []string
	for _, s := range kernelBenchSteps {
		if contains(cfg.Steps, s) {
			out = append(out, s)
		}
	}
	if contains(out, "rm") && !contains(out, "untar") {
		return nil, fmt.Errorf("kernel bench: rm is timed only with untar (each run removes the tree it untarred)")
	}
	return out, nil
}

// benchServer is one NFSv3 export on the host's loopback.
type benchServer struct {
	Name      string `json:"name"` // [a-z0-9]+: part of step names and paths
	NFSPort   int    `json:"nfs_port"`
	MountPort int    `json:"mount_port"`
	Export    string `json:"export"`
	// Store is branchnfs's store directory, if the server is branchnfs:
	// the calls it served per procedure are read from its control socket
	// around every timed step.
	Store string `json:"store,omitempty"`
	// PID is the server's process on the host, if known: its CPU time is
	// read around every step.
	PID int `json:"pid,omitempty"`
}

type kernelBenchResult struct {
	Tree    treeInfo            `json:"tree"`
	Boot    float64             `json:"boot_seconds"`
	Samples []kernelBenchSample `json:"samples"`
	Error   string              `json:"error,omitempty"`
}

type kernelBenchSample struct {
	Server  string  `json:"server"`
	Run     int     `json:"run"`
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
	// Procs are the calls the server received during the step, per
	// procedure ("nfs.LOOKUP"), for servers with a Store.
	Procs map[string]uint64 `json:"procs,omitempty"`
	// ServerMicros is the time the server spent in each procedure
	// during the step, in microseconds, for servers with a Store.
	ServerMicros map[string]uint64 `json:"server_us,omitempty"`
	// Client is what the guest's kernel client counted for the mount
	// during the step, per operation ("LOOKUP"), from the per-op
	// statistics of /proc/self/mountstats: for every server.
	Client map[string]clientOp `json:"client,omitempty"`
	// Events are the client's event counters of the mount during the
	// step (the "events:" and "bytes:" lines of its mountstats; see
	// eventNames), those that changed.
	Events map[string]uint64 `json:"client_events,omitempty"`
	// CPU is the CPU time, in seconds, used during the step by every
	// server with a PID (by name), by qemu ("qemu": the whole guest) and
	// by all the host's CPUs together ("host"), measured on the host
	// between the guest's reports that end the untimed step before and
	// this one. CPUBefore is the same over that untimed step (sync,
	// drop_caches, statistics).
	CPU       map[string]float64 `json:"cpu,omitempty"`
	CPUBefore map[string]float64 `json:"cpu_before,omitempty"`
}

// stepCPU returns the CPU times used during the timed step name and
// during the untimed step before it (name + "_drop"), from the samples
// bootGuest took when their lines arrived.
func stepCPU(res *bootResult, name string) (during, before map[string]float64) {
	st, drop := res.steps[name], res.steps[name+"_drop"]
	if st == nil || drop == nil {
		return nil, nil
	}
	prev := res.ready
	for _, x := range res.steps {
		if x.seq == drop.seq-1 {
			prev = x.cpu
		}
	}
	return cpuDelta(drop.cpu, st.cpu), cpuDelta(prev, drop.cpu)
}

// clientOp is one operation's line of a mount's per-op statistics in
// /proc/self/mountstats (Linux's rpc_iostats), over one step. Times are
// the kernel's sums, in milliseconds: RTT from sending the request to its
// reply, execute from the call's start to its end (RTT plus queueing and
// the client's own work).
type clientOp struct {
	Ops       uint64 `json:"ops"`
	Trans     uint64 `json:"trans"` // transmissions: more than ops when requests are retransmitted
	BytesSent uint64 `json:"bytes_sent"`
	BytesRecv uint64 `json:"bytes_recv"`
	QueueMs   uint64 `json:"queue_ms"`
	RTTMs     uint64 `json:"rtt_ms"`
	ExecMs    uint64 `json:"exec_ms"`
}

// clientCounter takes the guest's "host mstats NAME OP=v,v,... ..."
// requests: the per-op statistics of /mnt/NAME's mount as the guest's
// mstats function prints them (fields ops, transmissions, bytes sent,
// bytes received, queue, RTT and execute milliseconds), and its event
// counters as "events=v,v,..." and "bytes=v,v,...", and the whole
// guest's CPU ticks and TCP segments as "gcpu=..." and "tcp=...". Like
// procCounter, step k's figures are snapshot k+1 minus snapshot k; the
// guest's own counters are taken up to the next snapshot of any server
// (after a server's last step comes the other server's first).
type clientCounter struct {
	mu    sync.Mutex // protects the following
	snaps map[string][]clientSnap
	all   []map[string]uint64 // the guest's own counters of every snapshot, in order
}

type clientSnap struct {
	ops    map[string]clientOp
	events map[string]uint64
	seq    int // index in all
}

func newClientCounter() *clientCounter {
	return &clientCounter{snaps: map[string][]clientSnap{}}
}

// eventNames name the counters of a mount's "events:" line in
// /proc/self/mountstats, in order (Linux's enum nfs_stat_eventcounters),
// and bytesNames those of its "bytes:" line (enum nfs_stat_bytecounters).
// A kernel that prints more gets them named by position.
var (
	eventNames = []string{"inoderevalidates", "dentryrevalidates", "datainvalidates", "attrinvalidates",
		"vfsopen", "vfslookup", "vfsaccess", "vfsupdatepage", "vfsreadpage", "vfsreadpages",
		"vfswritepage", "vfswritepages", "vfsgetdents", "vfssetattr", "vfsflush", "vfsfsync",
		"vfslock", "vfsrelease", "congestionwait", "setattrtrunc", "extendwrite", "sillyrename",
		"shortread", "shortwrite", "delay", "pnfsread", "pnfswrite"}
	bytesNames = []string{"normalreadbytes", "normalwritebytes", "directreadbytes", "directwritebytes",
		"serverreadbytes", "serverwritebytes", "readpages", "writepages"}
	// The guest's own CPU time in ticks (the "cpu" line of its
	// /proc/stat), its interrupts and context switches (the "intr"
	// total and "ctxt") and its TCP segment counters (the Tcp line of
	// /proc/net/snmp, from InSegs on): the whole guest's, not the
	// mount's.
	gcpuNames = []string{"guest_user", "guest_nice", "guest_system", "guest_idle", "guest_iowait", "guest_irq", "guest_softirq", "guest_intr", "guest_ctxt"}
	tcpNames  = []string{"tcp_insegs", "tcp_outsegs", "tcp_retranssegs"}
	// Some of the guest's memory counters (/proc/vmstat), as vm_NAME:
	// pages allocated and freed, page faults, and the slab pages in use
	// (which grow with the inodes and dentries the client builds).
	vmNames = []string{"pgalloc_dma32", "pgalloc_normal", "pgfree", "pgfault", "nr_slab_reclaimable", "nr_slab_unreclaimable"}
)

// parseClientCounters parses a "events=v,v,..." or "bytes=v,v,..." token
// into out.
func parseClientCounters(kind, vals string, out map[string]uint64) error {
	names := map[string][]string{"events": eventNames, "bytes": bytesNames, "gcpu": gcpuNames, "tcp": tcpNames, "vm": vmNames}[kind]
	for i, f := range strings.Split(vals, ",") {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return fmt.Errorf("mstats: %s counter %d: %v", kind, i, err)
		}
		name := fmt.Sprintf("%s%d", kind, i)
		if i < len(names) {
			name = names[i]
			if kind == "vm" {
				name = "vm_" + name
			}
		}
		out[name] = v
	}
	return nil
}

// snapshot is the host action: args are the server's name and its
// operations' counters.
func (c *clientCounter) snapshot(args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("mstats: want a server name and its per-op counters")
	}
	var ops []string
	events, guest := map[string]uint64{}, map[string]uint64{}
	for _, t := range args[1:] {
		kind, vals, _ := strings.Cut(t, "=")
		var err error
		switch kind {
		case "events", "bytes":
			err = parseClientCounters(kind, vals, events)
		case "gcpu", "tcp", "vm":
			err = parseClientCounters(kind, vals, guest)
		default:
			ops = append(ops, t)
		}
		if err != nil {
			return err
		}
	}
	got, err := parseClientOps(ops)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.snaps[args[0]] = append(c.snaps[args[0]], clientSnap{got, events, len(c.all)})
	c.all = append(c.all, guest)
	c.mu.Unlock()
	return nil
}

// parseClientOps parses the guest's "OP=ops,trans,sent,recv,queue,rtt,exec"
// tokens.
func parseClientOps(tokens []string) (map[string]clientOp, error) {
	out := make(map[string]clientOp, len(tokens))
	for _, t := range tokens {
		name, vals, ok := strings.Cut(t, "=")
		f := strings.Split(vals, ",")
		if !ok || name == "" || len(f) != 7 {
			return nil, fmt.Errorf("mstats: %q is not OP=ops,trans,sent,recv,queue,rtt,exec", t)
		}
		var v [7]uint64
		for i := range f {
			if _, err := fmt.Sscan(f[i], &v[i]); err != nil {
				return nil, fmt.Errorf("mstats: %q: %v", t, err)
			}
		}
		out[name] = clientOp{Ops: v[0], Trans: v[1], BytesSent: v[2], BytesRecv: v[3], QueueMs: v[4], RTTMs: v[5], ExecMs: v[6]}
	}
	return out, nil
}

// step returns what the client counted for server during its i-th timed
// step, per operation and the event counters that changed, nil if it was
// not counted.
func (c *clientCounter) step(server string, i int) (map[string]clientOp, map[string]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.snaps[server]
	if i+1 >= len(s) {
		return nil, nil
	}
	ev := map[string]uint64{}
	for k, b := range s[i+1].events {
		if a := s[i].events[k]; b > a {
			ev[k] = b - a
		}
	}
	for k, b := range c.all[s[i].seq+1] {
		if a := c.all[s[i].seq][k]; b > a {
			ev[k] = b - a
		}
	}
	d := map[string]clientOp{}
	for k, b := range s[i+1].ops {
		a := s[i].ops[k]
		if b.Ops <= a.Ops {
			continue
		}
		d[k] = clientOp{Ops: b.Ops - a.Ops, Trans: b.Trans - a.Trans, BytesSent: b.BytesSent - a.BytesSent, BytesRecv: b.BytesRecv - a.BytesRecv,
			QueueMs: b.QueueMs - a.QueueMs, RTTMs: b.RTTMs - a.RTTMs, ExecMs: b.ExecMs - a.ExecMs}
	}
	return d, ev
}

// formatClient prints the client's calls per operation, most frequent
// first, with the average reply size and RTT.
func formatClient(m map[string]clientOp) string {
	keys := make([]string, 0, len(m))
	var total uint64
	for k, v := range m {
		keys = append(keys, k)
		total += v.Ops
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]].Ops != m[keys[j]].Ops {
			return m[keys[i]].Ops > m[keys[j]].Ops
		}
		return keys[i] < keys[j]
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d calls:", total)
	for _, k := range keys {
		o := m[k]
		fmt.Fprintf(&sb, " %s %d (%d B/reply, rtt %.2f ms, exec %.2f ms)", k, o.Ops, o.BytesRecv/o.Ops,
			float64(o.RTTMs)/float64(o.Ops), float64(o.ExecMs)/float64(o.Ops))
	}
	return sb.String()
}

// procCounter takes the guest's "host procs NAME" requests: each one
// appends a snapshot of NAME's calls per procedure, and the time spent in
// each, read from its control socket. The guest asks after every
// drop_caches that precedes a timed step and once after the last, so step
// k's calls are snapshot k+1 minus snapshot k.
type procCounter struct {
	stores map[string]string // server name -> store; read only

	mu    sync.Mutex // protects the following
	snaps map[string][]procSnap
}

// procSnap is one snapshot: calls and microseconds per procedure.
type procSnap struct{ calls, micros map[string]uint64 }

func newProcCounter(servers []benchServer) *procCounter {
	p := &procCounter{stores: map[string]string{}, snaps: map[string][]procSnap{}}
	for _, s := range servers {
		if s.Store != "" {
			p.stores[s.Name] = s.Store
		}
	}
	return p
}

// snapshot is the host action: args are the server's name.
func (p *procCounter) snapshot(args []string) error {
	if len(args) != 1 || p.stores[args[0]] == "" {
		return fmt.Errorf("procs: want the name of a server with a store, got %q", args)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, st, err := control.Dial(ctx, control.SocketPath(p.stores[args[0]]), 5*time.Second)
	if err != nil {
		return err
	}
	cl.Close()
	calls, err := procedures(st.NFS, "Procedures")
	if err != nil {
		return err
	}
	micros, err := procedures(st.NFS, "ProcedureMicros")
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.snaps[args[0]] = append(p.snaps[args[0]], procSnap{calls, micros})
	p.mu.Unlock()
	return nil
}

// procedures extracts a per-procedure counter (field of
// nfsserver.Metrics, as JSON) from the status's NFS counters.
func procedures(nfs any, field string) (map[string]uint64, error) {
	m, _ := nfs.(map[string]any)
	raw, ok := m[field].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("procs: the server's status has no %s: %v", field, nfs)
	}
	out := make(map[string]uint64, len(raw))
	for k, v := range raw {
		f, ok := v.(float64)
		if !ok {
			return nil, fmt.Errorf("procs: %s = %v is not a count", k, v)
		}
		out[k] = uint64(f)
	}
	return out, nil
}

// step returns the calls server received during its i-th timed step (in
// the order the guest ran them) and the microseconds it spent in each
// procedure, nil if it was not counted.
func (p *procCounter) step(server string, i int) (calls, micros map[string]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.snaps[server]
	if i+1 >= len(s) {
		return nil, nil
	}
	diff := func(a, b map[string]uint64) map[string]uint64 {
		d := map[string]uint64{}
		for k, v := range b {
			if n := v - a[k]; n > 0 {
				d[k] = n
			}
		}
		return d
	}
	return diff(s[i].calls, s[i+1].calls), diff(s[i].micros, s[i+1].micros)
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
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d calls:", total)
	for _, k := range keys {
		fmt.Fprintf(&sb, " %s %d", strings.TrimPrefix(k, "nfs."), m[k])
	}
	return sb.String()
}

type treeInfo struct {
	Source string `json:"source"`
	Files  int    `json:"files"`
	Dirs   int    `json:"dirs"`
	Bytes  int64  `json:"bytes"`
}

// kernelBenchSteps are the timed steps, in order.
var kernelBenchSteps = []string{"untar", "read", "lsR", "rm"}

// packTree writes a tarball of the regular files and directories under
// src (owned by root, as a package's files are) and a sha256sum list of
// its files, relative to the directory it is unpacked in.
func packTree(src, tarPath, sumsPath string) (treeInfo, error) {
	info := treeInfo{Source: src}
	f, err := os.Create(tarPath)
	if err != nil {
		return info, err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	var sums bytes.Buffer
	base := filepath.Base(src)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		name := filepath.ToSlash(filepath.Join(base, rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			info.Dirs++
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: fi.ModTime()})
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			info.Files++
			info.Bytes += int64(len(data))
			fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(data), name)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(fi.Mode().Perm()), Size: int64(len(data)), ModTime: fi.ModTime()}); err != nil {
				return err
			}
			_, err = io.Copy(tw, bytes.NewReader(data))
			return err
		}
		return nil // symlinks and the like: not part of the workload
	})
	if err != nil {
		return info, err
	}
	if err := tw.Close(); err != nil {
		return info, err
	}
	if info.Files == 0 {
		return info, fmt.Errorf("%s holds no files", src)
	}
	return info, os.WriteFile(sumsPath, sums.Bytes(), 0o644)
}

// runOrder returns the servers in the order run r (from 1) visits them:
// rotated by r-1, so that with two servers they go as given in odd runs
// and reversed in even ones, and with n servers each goes first once in
// every n runs. Whichever server goes first in a run follows the other's
// rm -rf and meets the guest in another state (one run with ganesha
// first had branchnfs's untar at 1.11x ganesha where runs with branchnfs
// first had it at 0.88-0.98x), so no server should always go first.
func runOrder(servers []benchServer, r int) []benchServer {
	if len(servers) == 0 {
		return nil
	}
	k := (r - 1) % len(servers)
	return append(slices.Clone(servers[k:]), servers[:k]...)
}

// kernelBenchScript is the guest's scenario: mount every server, then per
// run and server (see runOrder) the timed steps, each after an untimed
// drop_caches step.
func kernelBenchScript(cfg kernelBenchConfig, tree treeInfo) string {
	var sb strings.Builder
	top := filepath.Base(tree.Source)
	fmt.Fprintf(&sb, `
bench_mount() { # NAME EXPORT NFSPORT MOUNTPORT
	mkdir -p /mnt/$1 && /bin/mounthelper mount "10.0.2.2:$2" /mnt/$1 "vers=3,proto=tcp,port=$3,mountport=$4,mountproto=tcp,nolock,noacl,mountvers=3,addr=10.0.2.2,mountaddr=10.0.2.2"
}
untar() { mkdir -p "$1" && cd "$1" && tar xf /tree.tar && cd / && sync; }
read_all() { cd "$1" && sha256sum -c -s /sums.txt || fail "checksums differ in $1"; }
lsR() { n=$(ls -lR "$1/%[1]s" | grep -c '^-'); [ "$n" = %[2]d ] || fail "ls -lR lists $n files, want %[2]d"; echo "$n files"; }
rmrf() { rm -rf "$1" && [ ! -e "$1" ] || fail "$1 still there after rm -rf"; }
drop_count() { drop_caches && host mstats "$1" $(mstats "$1") && { [ "$2" != procs ] || host procs "$1"; }; }
# mstats NAME: the per-op statistics of /mnt/NAME's mount, one
# OP=ops,trans,sent,recv,queue,rtt,exec token per operation used so far,
# its event and byte counters as events=v,v,... and bytes=v,v,..., and
# the guest's CPU ticks and TCP segments as gcpu=... and tcp=...
mstats() {
	awk -v m="/mnt/$1" '$1 == "device" { on = ($5 == m) }
		on && ($1 == "events:" || $1 == "bytes:") { printf "%%s=%%s", substr($1, 1, length($1)-1), $2; for (i = 3; i <= NF; i++) printf ",%%s", $i; printf " " }
		on && /^[ \t]*[A-Z_0-9]+: [0-9]/ && $2 > 0 { printf "%%s=%%s,%%s,%%s,%%s,%%s,%%s,%%s ", substr($1, 1, length($1)-1), $2, $3, $5, $6, $7, $8, $9 }' /proc/self/mountstats
	awk '$1 == "cpu" { c = $2 "," $3 "," $4 "," $5 "," $6 "," $7 "," $8 } $1 == "intr" { i = $2 } $1 == "ctxt" { x = $2 }
		END { printf "gcpu=%%s,%%s,%%s ", c, i, x }' /proc/stat
	awk '$1 == "Tcp:" && $2 ~ /^[0-9]/ { printf "tcp=%%s,%%s,%%s ", $11, $12, $13 }' /proc/net/snmp
	awk -v names="%[3]s" 'BEGIN { n = split(names, k, " ") } { v[$1] = $2 }
		END { printf "vm="; for (i = 1; i <= n; i++) printf "%%s%%.0f", (i > 1 ? "," : ""), v[k[i]] + 0; printf " " }' /proc/vmstat
}
`, top, tree.Files, strings.Join(vmNames, " "))
	for _, s := range cfg.Servers {
		fmt.Fprintf(&sb, "step mount_%s bench_mount %s %s %d %d\n", s.Name, s.Name, s.Export, s.NFSPort, s.MountPort)
	}
	// Untimed, before every timed step and once after the last: the
	// client's per-op statistics and, from servers with a store, the calls
	// they served per procedure.
	drop := func(s benchServer) string {
		if s.Store != "" {
			return "drop_count " + s.Name + " procs"
		}
		return "drop_count " + s.Name
	}
	steps, _ := cfg.timedSteps() // checked by the caller
	untarEach := contains(steps, "untar")
	if !untarEach {
		// One untimed copy per server that every run reads or lists.
		for _, s := range cfg.Servers {
			fmt.Fprintf(&sb, "step prep_%s untar /mnt/%s/kbench0\n", s.Name, s.Name)
		}
	}
	for r := 1; r <= cfg.Runs; r++ {
		for _, s := range runOrder(cfg.Servers, r) {
			d := fmt.Sprintf("/mnt/%s/kbench%d", s.Name, r)
			if !untarEach {
				d = fmt.Sprintf("/mnt/%s/kbench0", s.Name)
			}
			fns := map[string]string{"untar": "untar", "read": "read_all", "lsR": "lsR", "rm": "rmrf"}
			for _, step := range steps {
				fmt.Fprintf(&sb, "step r%d_%s_%s_drop %s\n", r, s.Name, step, drop(s))
				fmt.Fprintf(&sb, "step r%d_%s_%s %s %s\n", r, s.Name, step, fns[step], d)
			}
		}
	}
	for _, s := range cfg.Servers {
		fmt.Fprintf(&sb, "step counts_%s %s\n", s.Name, drop(s))
	}
	return sb.String()
}

// TestKernelBenchScript checks the generated scenario without booting a
// guest: every timed step follows its own drop_caches step, and every
// step the benchmark reads is declared.
func TestKernelBenchScript(t *testing.T) {
	cfg := kernelBenchConfig{Runs: 2, Servers: []benchServer{{Name: "a", NFSPort: 1, MountPort: 2, Export: "/x", Store: "/s"}, {Name: "b", NFSPort: 3, MountPort: 3, Export: "/y"}}}
	script := kernelBenchScript(cfg, treeInfo{Source: "/usr/src/net", Files: 7})
	steps := scenarioSteps(script)
	if len(steps) != 2+2*2*len(kernelBenchSteps)*2+2 {
		t.Fatalf("%d steps: %v", len(steps), steps)
	}
	for i, s := range steps {
		if strings.HasSuffix(s, "_drop") && (i+1 >= len(steps) || steps[i+1]+"_drop" != s) {
			t.Errorf("step %s is not followed by its timed step", s)
		}
	}
	// Every server's client statistics are read after each drop and once
	// at the end; only the server with a store is asked for its calls.
	if n := strings.Count(script, "drop_count a procs\n"); n != 2*len(kernelBenchSteps)+1 {
		t.Errorf("server a counts calls %d times, want %d", n, 2*len(kernelBenchSteps)+1)
	}
	if n := strings.Count(script, "drop_count b\n"); n != 2*len(kernelBenchSteps)+1 {
		t.Errorf("server b's client statistics are read %d times, want %d", n, 2*len(kernelBenchSteps)+1)
	}
	if strings.Contains(script, "drop_count b procs") {
		t.Errorf("server b has no store but counts calls")
	}
	for _, want := range []string{"r1_a_untar", "r2_b_rm", "mount_b", "counts_a", "counts_b"} {
		if !contains(steps, want) {
			t.Errorf("script lacks step %s", want)
		}
	}
	// Run 1 visits a then b, run 2 b then a.
	idx := func(step string) int { return slices.Index(steps, step) }
	if !(idx("r1_a_rm") < idx("r1_b_untar_drop") && idx("r1_b_rm") < idx("r2_b_untar_drop") && idx("r2_b_rm") < idx("r2_a_untar_drop")) {
		t.Errorf("servers not alternated: %v", steps)
	}
	if !strings.Contains(script, `bench_mount a /x 1 2`) || !strings.Contains(script, `want 7"`) {
		t.Errorf("script:\n%s", script)
	}
}

// TestKernelBenchScriptSteps checks the scenario that times only some
// steps: the tree is untarred once per server, untimed, and every run
// lists that copy; steps that cannot run alone are refused.
func TestKernelBenchScriptSteps(t *testing.T) {
	cfg := kernelBenchConfig{Runs: 4, Steps: []string{"lsR"}, Servers: []benchServer{{Name: "a", Export: "/x", Store: "/s"}, {Name: "b", Export: "/y"}}}
	steps := scenarioSteps(kernelBenchScript(cfg, treeInfo{Source: "/usr/src/net", Files: 7}))
	var timed []string
	for _, s := range steps {
		if strings.HasPrefix(s, "r") && !strings.HasSuffix(s, "_drop") {
			timed = append(timed, s)
		}
	}
	if got := strings.Join(timed, " "); got != "r1_a_lsR r1_b_lsR r2_b_lsR r2_a_lsR r3_a_lsR r3_b_lsR r4_b_lsR r4_a_lsR" {
		t.Errorf("timed steps %s", got)
	}
	if !(slices.Index(steps, "prep_a") >= 0 && slices.Index(steps, "prep_b") < slices.Index(steps, "r1_a_lsR_drop")) {
		t.Errorf("the tree is not untarred before the runs: %v", steps)
	}
	script := kernelBenchScript(cfg, treeInfo{Source: "/usr/src/net", Files: 7})
	if !strings.Contains(script, "step r3_b_lsR lsR /mnt/b/kbench0\n") || strings.Contains(script, "kbench1") {
		t.Errorf("runs do not all list the one copy:\n%s", script)
	}
	for _, c := range []struct {
		steps []string
		want  string // "" for accepted, else part of the error
	}{
		{nil, ""}, {[]string{"rm", "untar"}, ""}, {[]string{"read", "lsR"}, ""},
		{[]string{"rm"}, "only with untar"}, {[]string{"lsR", "ls"}, `unknown step "ls"`},
	} {
		got, err := kernelBenchConfig{Steps: c.steps}.timedSteps()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("steps %v: %v", c.steps, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("steps %v: error %v, want %q", c.steps, err, c.want)
		}
		if c.want == "" && len(c.steps) == 2 && (len(got) != 2 || !slices.IsSorted([]int{slices.Index(kernelBenchSteps, got[0]), slices.Index(kernelBenchSteps, got[1])})) {
			t.Errorf("steps %v run as %v, want kernelBenchSteps' order", c.steps, got)
		}
	}
	// Three servers: each goes first once in three runs.
	three := []benchServer{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	var firsts []string
	for r := 1; r <= 3; r++ {
		o := runOrder(three, r)
		if len(o) != 3 {
			t.Fatalf("run %d visits %v", r, o)
		}
		firsts = append(firsts, o[0].Name)
	}
	if got := strings.Join(firsts, ""); got != "abc" {
		t.Errorf("first servers of runs 1-3: %s, want abc", got)
	}
}

// TestClientCounter parses the guest's per-op statistics and takes a
// step's figures as the difference of the snapshots around it.
func TestClientCounter(t *testing.T) {
	c := newClientCounter()
	if err := c.snapshot([]string{"a", "GETATTR=3,3,372,336,0,1,2"}); err != nil {
		t.Fatal(err)
	}
	if err := c.snapshot([]string{"a", "GETATTR=5,6,620,560,1,4,6", "READDIRPLUS=2,2,300,9000,0,10,12"}); err != nil {
		t.Fatal(err)
	}
	got, _ := c.step("a", 0)
	want := map[string]clientOp{
		"GETATTR":     {Ops: 2, Trans: 3, BytesSent: 248, BytesRecv: 224, QueueMs: 1, RTTMs: 3, ExecMs: 4},
		"READDIRPLUS": {Ops: 2, Trans: 2, BytesSent: 300, BytesRecv: 9000, RTTMs: 10, ExecMs: 12},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("step 0 = %+v, want %+v", got, want)
	}
	if got, ev := c.step("a", 1); got != nil || ev != nil {
		t.Errorf("step 1 = %v %v, want nil", got, ev)
	}
	if got := formatClient(want); got != "4 calls: GETATTR 2 (112 B/reply, rtt 1.50 ms, exec 2.00 ms) READDIRPLUS 2 (4500 B/reply, rtt 5.00 ms, exec 6.00 ms)" {
		t.Errorf("formatClient = %q", got)
	}
	// Event counters: named by position, extra ones by kind and index;
	// a step keeps those that grew.
	c.snapshot([]string{"e", "events=5,1,0,2", "bytes=100,0", "GETATTR=1,1,1,1,0,0,0"})
	c.snapshot([]string{"e", "events=9,1,0,3", "bytes=400,0", "GETATTR=2,2,2,2,0,0,0"})
	if ops, ev := c.step("e", 0); len(ops) != 1 || fmt.Sprint(ev) != "map[attrinvalidates:1 inoderevalidates:4 normalreadbytes:300]" {
		t.Errorf("step with events = %v %v", ops, ev)
	}
	// The guest's own counters run to the next snapshot of any server:
	// g's step 0 ends at h's snapshot, not at g's next one.
	c.snapshot([]string{"g", "gcpu=10,0,5,100,0,0,1", "tcp=50,40,0", "vm=1,100,90,7,1,2"})
	c.snapshot([]string{"h", "gcpu=12,0,9,100,0,0,1", "tcp=60,48,0", "vm=1,300,250,7,2,2"})
	c.snapshot([]string{"g", "gcpu=99,0,99,999,0,0,9", "tcp=999,999,9", "vm=9,999,999,99,99999,99999"})
	if _, ev := c.step("g", 0); fmt.Sprint(ev) != "map[guest_system:4 guest_user:2 tcp_insegs:10 tcp_outsegs:8 vm_nr_slab_reclaimable:1 vm_pgalloc_normal:200 vm_pgfree:160]" {
		t.Errorf("guest counters of g's step 0 = %v", ev)
	}
	long := "events=" + strings.Repeat("0,", len(eventNames)) + "7"
	if err := c.snapshot([]string{"f", long}); err != nil || c.snaps["f"][0].events[fmt.Sprintf("events%d", len(eventNames))] != 7 {
		t.Errorf("snapshot(%q) = %v, %v", long, err, c.snaps["f"])
	}
	for _, bad := range []string{"GETATTR=1,2,3", "=1,1,1,1,1,1,1", "GETATTR", "GETATTR=1,1,1,x,1,1,1", "events=1,x", "bytes="} {
		if err := c.snapshot([]string{"a", bad}); err == nil {
			t.Errorf("snapshot accepted %q", bad)
		}
	}
}

// TestPackTree unpacks the tarball packTree writes and checks the sums.
func TestPackTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "a.go"), []byte("package a\n"), 0o644)
	os.WriteFile(filepath.Join(src, "sub", "b.txt"), []byte("bee"), 0o600)
	out := t.TempDir()
	info, err := packTree(src, filepath.Join(out, "t.tar"), filepath.Join(out, "sums"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Files != 2 || info.Dirs != 2 || info.Bytes != 13 {
		t.Errorf("info = %+v, want 2 files, 2 dirs, 13 bytes", info)
	}
	sums, _ := os.ReadFile(filepath.Join(out, "sums"))
	want := fmt.Sprintf("%x  tree/a.go\n%x  tree/sub/b.txt\n", sha256.Sum256([]byte("package a\n")), sha256.Sum256([]byte("bee")))
	if string(sums) != want {
		t.Errorf("sums:\n%s\nwant:\n%s", sums, want)
	}
	f, _ := os.Open(filepath.Join(out, "t.tar"))
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, " "); got != "tree/ tree/a.go tree/sub/ tree/sub/b.txt" {
		t.Errorf("tar holds %s", got)
	}
}

// TestProcCounterSteps checks that a step's calls are the difference of
// the snapshots around it.
func TestProcCounterSteps(t *testing.T) {
	p := newProcCounter([]benchServer{{Name: "a", Store: "/s"}, {Name: "b"}})
	p.snaps["a"] = []procSnap{
		{map[string]uint64{"nfs.LOOKUP": 3}, map[string]uint64{"nfs.LOOKUP": 30}},
		{map[string]uint64{"nfs.LOOKUP": 10, "nfs.CREATE": 4}, map[string]uint64{"nfs.LOOKUP": 100, "nfs.CREATE": 400}},
		{map[string]uint64{"nfs.LOOKUP": 10, "nfs.CREATE": 4, "nfs.COMMIT": 1}, map[string]uint64{"nfs.LOOKUP": 100, "nfs.CREATE": 400, "nfs.COMMIT": 9}},
	}
	if got, us := p.step("a", 0); len(got) != 2 || got["nfs.LOOKUP"] != 7 || got["nfs.CREATE"] != 4 || us["nfs.LOOKUP"] != 70 || us["nfs.CREATE"] != 400 {
		t.Errorf("step 0 = %v %v, want LOOKUP 7 CREATE 4, 70 and 400 µs", got, us)
	}
	if got, us := p.step("a", 1); len(got) != 1 || got["nfs.COMMIT"] != 1 || len(us) != 1 || us["nfs.COMMIT"] != 9 {
		t.Errorf("step 1 = %v %v, want COMMIT 1 in 9 µs", got, us)
	}
	if got, _ := p.step("a", 2); got != nil {
		t.Errorf("step 2 = %v, want nil (no snapshot after it)", got)
	}
	if err := p.snapshot([]string{"b"}); err == nil {
		t.Errorf("snapshot of a server without a store succeeded")
	}
	if got := formatProcs(map[string]uint64{"nfs.GETATTR": 2, "nfs.ACCESS": 5}); got != "7 calls: ACCESS 5 GETATTR 2" {
		t.Errorf("formatProcs = %q", got)
	}
}

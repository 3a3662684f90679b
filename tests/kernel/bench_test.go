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
	"sort"
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
// elsewhere on the machine spreads over all of them.
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
	script := kernelBenchScript(cfg, tree)
	procs := newProcCounter(cfg.Servers)
	b.ResetTimer()
	res := bootGuest(b, img, helper, script, map[string]string{}, map[string]hostAction{"procs": procs.snapshot}, 60*time.Minute,
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
			for i, step := range kernelBenchSteps {
				name := fmt.Sprintf("r%d_%s_%s", r, s.Name, step)
				smp := kernelBenchSample{Server: s.Name, Run: r, Step: step}
				smp.Procs = procs.step(s.Name, (r-1)*len(kernelBenchSteps)+i)
				if len(smp.Procs) > 0 {
					counted = append(counted, name+": "+formatProcs(smp.Procs))
				}
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
	Out     string        `json:"out"` // where the kernelBenchResult goes
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
}

// procCounter takes the guest's "host procs NAME" requests: each one
// appends a snapshot of NAME's calls per procedure, read from its control
// socket. The guest asks after every drop_caches that precedes a timed
// step and once after the last, so step k's calls are snapshot k+1 minus
// snapshot k.
type procCounter struct {
	stores map[string]string // server name -> store; read only

	mu    sync.Mutex // protects the following
	snaps map[string][]map[string]uint64
}

func newProcCounter(servers []benchServer) *procCounter {
	p := &procCounter{stores: map[string]string{}, snaps: map[string][]map[string]uint64{}}
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
	got, err := procedures(st.NFS)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.snaps[args[0]] = append(p.snaps[args[0]], got)
	p.mu.Unlock()
	return nil
}

// procedures extracts the calls per procedure from the status's NFS
// counters (nfsserver.Metrics, as JSON).
func procedures(nfs any) (map[string]uint64, error) {
	m, _ := nfs.(map[string]any)
	raw, ok := m["Procedures"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("procs: the server's status has no calls per procedure: %v", nfs)
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
// the order the guest ran them), nil if it was not counted.
func (p *procCounter) step(server string, i int) map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.snaps[server]
	if i+1 >= len(s) {
		return nil
	}
	d := map[string]uint64{}
	for k, v := range s[i+1] {
		if n := v - s[i][k]; n > 0 {
			d[k] = n
		}
	}
	return d
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

// kernelBenchScript is the guest's scenario: mount every server, then per
// run and server the timed steps, each after an untimed drop_caches step.
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
drop_count() { drop_caches && host procs "$1"; }
`, top, tree.Files)
	for _, s := range cfg.Servers {
		fmt.Fprintf(&sb, "step mount_%s bench_mount %s %s %d %d\n", s.Name, s.Name, s.Export, s.NFSPort, s.MountPort)
	}
	for r := 1; r <= cfg.Runs; r++ {
		for _, s := range cfg.Servers {
			d := fmt.Sprintf("/mnt/%s/kbench%d", s.Name, r)
			fns := map[string]string{"untar": "untar", "read": "read_all", "lsR": "lsR", "rm": "rmrf"}
			drop := "drop_caches"
			if s.Store != "" {
				// Untimed: the calls per procedure so far.
				drop = "drop_count " + s.Name
			}
			for _, step := range kernelBenchSteps {
				fmt.Fprintf(&sb, "step r%d_%s_%s_drop %s\n", r, s.Name, step, drop)
				fmt.Fprintf(&sb, "step r%d_%s_%s %s %s\n", r, s.Name, step, fns[step], d)
			}
		}
	}
	for _, s := range cfg.Servers {
		if s.Store != "" {
			fmt.Fprintf(&sb, "step procs_%s drop_count %s\n", s.Name, s.Name)
		}
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
	if len(steps) != 2+2*2*len(kernelBenchSteps)*2+1 {
		t.Fatalf("%d steps: %v", len(steps), steps)
	}
	for i, s := range steps {
		if strings.HasSuffix(s, "_drop") && (i+1 >= len(steps) || steps[i+1]+"_drop" != s) {
			t.Errorf("step %s is not followed by its timed step", s)
		}
	}
	// Only the server with a store counts calls, after each drop and once
	// at the end.
	if n := strings.Count(script, "drop_count a\n"); n != 2*len(kernelBenchSteps)+1 {
		t.Errorf("server a counts calls %d times, want %d", n, 2*len(kernelBenchSteps)+1)
	}
	if strings.Contains(script, "drop_count b") {
		t.Errorf("server b has no store but counts calls")
	}
	for _, want := range []string{"r1_a_untar", "r2_b_rm", "mount_b", "procs_a"} {
		if !contains(steps, want) {
			t.Errorf("script lacks step %s", want)
		}
	}
	if !strings.Contains(script, `bench_mount a /x 1 2`) || !strings.Contains(script, `want 7"`) {
		t.Errorf("script:\n%s", script)
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
	p.snaps["a"] = []map[string]uint64{
		{"nfs.LOOKUP": 3},
		{"nfs.LOOKUP": 10, "nfs.CREATE": 4},
		{"nfs.LOOKUP": 10, "nfs.CREATE": 4, "nfs.COMMIT": 1},
	}
	if got := p.step("a", 0); len(got) != 2 || got["nfs.LOOKUP"] != 7 || got["nfs.CREATE"] != 4 {
		t.Errorf("step 0 = %v, want LOOKUP 7 CREATE 4", got)
	}
	if got := p.step("a", 1); len(got) != 1 || got["nfs.COMMIT"] != 1 {
		t.Errorf("step 1 = %v, want COMMIT 1", got)
	}
	if got := p.step("a", 2); got != nil {
		t.Errorf("step 2 = %v, want nil (no snapshot after it)", got)
	}
	if err := p.snapshot([]string{"b"}); err == nil {
		t.Errorf("snapshot of a server without a store succeeded")
	}
	if got := formatProcs(map[string]uint64{"nfs.GETATTR": 2, "nfs.ACCESS": 5}); got != "7 calls: ACCESS 5 GETATTR 2" {
		t.Errorf("formatProcs = %q", got)
	}
}

// Command seqab compares the sequential READ of branchnfs binaries, old
// and new, outside the full benchmark: each serves a fresh store of its
// own; every round runs each binary once, alternating which goes first.
// A round writes a 256 MiB file with the Go client and reads it back four
// times (4 connections x 2 READs of 1 MiB in flight), sampling the
// server's CPU time around the reads (1 GiB per sample, so that the 10 ms
// ticks of /proc/PID/stat weigh 10 ms per GiB), then reads it once more
// with one READ at a time. It prints the median and every round's figure
// per binary. A BIN of the form ext=PID,NFSPORT,MOUNTPORT,EXPORT is a
// server already running (ganesha, say), measured the same way. Run it
// under the benchmark lock:
//
//	flock /tmp/bench.lock go run ./bench/cmd/seqab -rounds 6 OLD NEW
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/workload"
)

func main() {
	rounds := flag.Int("rounds", 5, "rounds")
	size := flag.Int("size-mib", 256, "file size")
	fresh := flag.Bool("fresh", false, "write new content every round (not the last round's again, which the store dedupes)")
	flag.Parse()
	bins := flag.Args()
	if len(bins) == 0 {
		fmt.Fprintln(os.Stderr, "usage: seqab [flags] BIN...")
		os.Exit(2)
	}
	type srv struct {
		bin  string
		cmd  *exec.Cmd
		t    nfsclient.Target
		cpu  []float64
		mibs []float64
		one  []float64
		// The first read after the write alone, as the benchmark
		// measures it: MiB/s and server CPU ms per GiB.
		first, firstCPU []float64
		write           []float64 // MiB/s
	}
	var ss []*srv
	tmp, _ := os.MkdirTemp("", "seqab")
	defer os.RemoveAll(tmp)
	for i, b := range bins {
		if spec, ok := strings.CutPrefix(b, "ext="); ok {
			// An already-running server (ganesha, say):
			// ext=PID,NFSPORT,MOUNTPORT,EXPORT.
			f := strings.Split(spec, ",")
			if len(f) != 4 {
				fmt.Fprintln(os.Stderr, "seqab: ext=PID,NFSPORT,MOUNTPORT,EXPORT")
				os.Exit(2)
			}
			pid, _ := strconv.Atoi(f[0])
			np, _ := strconv.Atoi(f[1])
			mp, _ := strconv.Atoi(f[2])
			proc, err := os.FindProcess(pid)
			if err != nil {
				panic(err)
			}
			ss = append(ss, &srv{bin: b, cmd: &exec.Cmd{Process: proc}, t: nfsclient.Target{Host: "127.0.0.1", NFSPort: np, MountPort: mp, Export: f[3]}})
			continue
		}
		store := filepath.Join(tmp, fmt.Sprint(i))
		if out, err := exec.Command(b, "init", "--store", store).CombinedOutput(); err != nil {
			fmt.Fprintln(os.Stderr, string(out), err)
			os.Exit(1)
		}
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(b, "serve", "--store", store, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
		if os.Getenv("SEQAB_STDERR") != "" {
			cmd.Stderr = os.Stderr
		}
		if err := cmd.Start(); err != nil {
			panic(err)
		}
		defer cmd.Process.Kill()
		s := &srv{bin: b, cmd: cmd, t: nfsclient.Target{Host: "127.0.0.1", NFSPort: port, MountPort: port, Export: "/main"}}
		for range 100 {
			if c, err := nfsclient.Dial(s.t); err == nil {
				c.Close()
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		ss = append(ss, s)
	}
	data := workload.Data(1, *size<<20)
	for r := 0; r < *rounds; r++ {
		if *fresh && r > 0 {
			data = workload.Data(uint64(r+1), *size<<20)
		}
		order := append([]*srv(nil), ss...)
		if r%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, s := range order {
			var c0, c1 float64
			res, err := workload.Seq(s.t, data, workload.SeqOptions{Name: "seq.bin", ReqSize: 1 << 20, Conns: 4, Depth: 2, Keep: true,
				BeforeRead: func() { c0 = cpu(s.cmd.Process.Pid) }, AfterRead: func() { c1 = cpu(s.cmd.Process.Pid) }})
			if err != nil {
				panic(err)
			}
			// Three more reads of the same file, so that a sample
			// spans 1 GiB (CPU time comes in 10 ms ticks).
			back := workload.ReadBuffer(len(data)) // touched before the clock starts
			c2 := cpu(s.cmd.Process.Pid)
			t0 := time.Now()
			for range 3 {
				readPar(s.t, back)
			}
			el := time.Since(t0).Seconds()
			c3 := cpu(s.cmd.Process.Pid)
			s.cpu = append(s.cpu, (c1-c0+c3-c2)*1000/(4*float64(len(data))/(1<<30)))
			s.mibs = append(s.mibs, 4*float64(len(data))/(1<<20)/(float64(len(data))/(1<<20)/res.ReadMiBps+el))
			s.one = append(s.one, readOne(s.t, len(data)))
			s.first = append(s.first, res.ReadMiBps)
			s.write = append(s.write, res.WriteMiBps)
			s.firstCPU = append(s.firstCPU, (c1-c0)*1000/(float64(len(data))/(1<<30)))
		}
	}
	for _, s := range ss {
		fmt.Printf("%s\tcpu ms/GiB %v\tMiB/s %v\tone-at-a-time MiB/s %v\n", s.bin, med(s.cpu), med(s.mibs), med(s.one))
		fmt.Printf("%s\tfirst read: MiB/s %v\tcpu ms/GiB %v\twrite MiB/s %v\n", s.bin, med(s.first), med(s.firstCPU), med(s.write))
	}
}

// readPar reads seq.bin into back with 4 connections and 2 READs in
// flight on each.
func readPar(t nfsclient.Target, back []byte) {
	n := len(back)
	c0, err := nfsclient.Dial(t)
	if err != nil {
		panic(err)
	}
	defer c0.Close()
	conns := []*nfsclient.Conn{c0}
	for len(conns) < 4 {
		c, err := nfsclient.DialHandle(t, c0.Root)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	fh, _, err := c0.Lookup(c0.Root, "seq.bin")
	if err != nil {
		panic(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func(c *nfsclient.Conn) {
			defer wg.Done()
			for {
				off := int(next.Add(1<<20)) - 1<<20
				if off >= n {
					return
				}
				if err := c.ReadFull(fh, uint64(off), back[off:min(off+1<<20, n)]); err != nil {
					panic(err)
				}
			}
		}(conns[w%4])
	}
	wg.Wait()
}

// readOne reads seq.bin with one 1 MiB READ at a time; returns MiB/s.
func readOne(t nfsclient.Target, n int) float64 {
	c, err := nfsclient.Dial(t)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fh, _, err := c.Lookup(c.Root, "seq.bin")
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 1<<20)
	start := time.Now()
	for off := 0; off < n; off += len(buf) {
		if err := c.ReadFull(fh, uint64(off), buf); err != nil {
			panic(err)
		}
	}
	return float64(n) / (1 << 20) / time.Since(start).Seconds()
}

func cpu(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

func med(x []float64) string {
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	parts := make([]string, len(x))
	for i, v := range x {
		parts[i] = fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.0f [%s]", y[len(y)/2], strings.Join(parts, " "))
}

// Command nfsprof runs the branchnfs NFS server in-process over a fresh
// store and drives one workload against it over loopback, with CPU, heap,
// mutex and block profiles on. It is the "pprof on the server" of
// docs/benchmarks.md: the client's own cost shows up under bench/nfsclient
// and can be told apart from nfsserver, cowfs and kv.
//
//	go run ./bench/cmd/nfsprof -workload seq -size-mib 256 -out /tmp/prof
//	go tool pprof -top /tmp/prof/cpu.prof
//
// -workload read writes the file once, unprofiled, and profiles only the
// reads of it (READ is the path the sequential figures are weakest on).
//
// -workload read-inherited writes the file in main, forks three branches
// deep (d1, d2, d3) and reads it through d3's export, each run right after
// a read of the same bytes written in main's top layer after the forks,
// profiling both. It prints the
// MiB/s of both per run, their ratio, and the store reads per 1 MiB READ
// of each (point reads and key iterations, counted under the branch
// manager). With -churn, another client writes and deletes files in main
// while a GC runs in a loop, as the background reclaimer does while other
// clients work (rechunk and coalesce then change block references of
// layers other than those the reads go through).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/nfsserver"
)

func main() {
	wl := flag.String("workload", "seq", "seq, read (reads only), read-inherited or meta")
	size := flag.Int("size-mib", 256, "seq: file size")
	files := flag.Int("files", 10000, "meta: files")
	runs := flag.Int("runs", 2, "workload runs (the first warms up)")
	churn := flag.Bool("churn", false, "read-inherited: write in main and run GC meanwhile")
	out := flag.String("out", "/tmp/nfsprof", "directory for the profiles")
	flag.Parse()
	if err := run(*wl, *size, *files, *runs, *churn, *out); err != nil {
		fmt.Fprintln(os.Stderr, "nfsprof:", err)
		os.Exit(1)
	}
}

func run(wl string, sizeMiB, files, runs int, churn bool, out string) error {
	ctx := context.Background()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nfsprof")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kvs, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		return err
	}
	defer kvs.Close()
	var store kv.Store = kvs
	var counts *countingStore
	if wl == "read-inherited" {
		counts = &countingStore{Store: kvs}
		store = counts
	}
	m, err := branches.Open(ctx, branches.Options{Store: store})
	if err != nil {
		return err
	}
	defer m.Close()
	srv, err := nfsserver.New(nfsserver.Options{Branches: m, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ctx, ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	t := nfsclient.Target{Host: "127.0.0.1", NFSPort: port, MountPort: port, Export: "/main"}

	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	cpuf, err := os.Create(filepath.Join(out, "cpu.prof"))
	if err != nil {
		return err
	}
	var results []any
	data := workload.Data(1, sizeMiB<<20)
	if wl == "read" {
		r, err := profileReads(t, data, runs, cpuf)
		if err != nil {
			return err
		}
		results = append(results, r)
		runs = 0
	}
	if wl == "read-inherited" {
		r, err := profileInherited(ctx, m, counts, t, data, runs, churn, cpuf)
		if err != nil {
			return err
		}
		results = append(results, r)
		runs = 0
	}
	for i := 0; i < runs; i++ {
		if i == runs-1 {
			pprof.StartCPUProfile(cpuf)
		}
		var r any
		switch wl {
		case "seq":
			r, err = workload.Seq(t, data, workload.SeqOptions{Name: "seq.bin", ReqSize: 1 << 20, Conns: 4, Depth: 2})
		case "meta":
			r, err = workload.Meta(t, workload.MetaOptions{Dir: fmt.Sprintf("meta%d", i), Files: files, FileSize: 1024, Workers: 4})
		default:
			err = fmt.Errorf("unknown workload %q", wl)
		}
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	pprof.StopCPUProfile()
	cpuf.Close()
	for _, name := range []string{"heap", "allocs", "mutex", "block"} {
		f, err := os.Create(filepath.Join(out, name+".prof"))
		if err != nil {
			return err
		}
		pprof.Lookup(name).WriteTo(f, 0)
		f.Close()
	}
	b, _ := json.MarshalIndent(results, "", "  ")
	fmt.Println(string(b))
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
			fmt.Println("process (server + client):", l)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("Go heap: HeapSys %d MiB, HeapInuse %d MiB, TotalAlloc %d MiB, NumGC %d\n", ms.HeapSys>>20, ms.HeapInuse>>20, ms.TotalAlloc>>20, ms.NumGC)
	fmt.Printf("profiles in %s (cpu, heap, allocs, mutex, block)\n", out)
	return nil
}

// profileReads writes data to a file once, then reads it back runs times
// with 4 connections and 2 requests in flight on each (as workload.Seq
// does), profiling the CPU over the reads only. It returns MiB/s per run.
func profileReads(t nfsclient.Target, data []byte, runs int, cpuf *os.File) ([]float64, error) {
	c0, err := nfsclient.Dial(t)
	if err != nil {
		return nil, err
	}
	defer c0.Close()
	conns := []*nfsclient.Conn{c0}
	for len(conns) < 4 {
		c, err := nfsclient.DialHandle(t, c0.Root)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		conns = append(conns, c)
	}
	fh, err := c0.Create(c0.Root, "read.bin", 0o644)
	if err != nil {
		return nil, err
	}
	const req = 1 << 20
	for off := 0; off < len(data); off += req {
		if err := c0.WriteFull(fh, uint64(off), data[off:min(off+req, len(data))], nfsclient.Unstable); err != nil {
			return nil, err
		}
	}
	if err := c0.Commit(fh); err != nil {
		return nil, err
	}
	back := workload.ReadBuffer(len(data))
	var rates []float64
	pprof.StartCPUProfile(cpuf)
	defer pprof.StopCPUProfile()
	for range runs {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		start := time.Now()
		for w := range 8 {
			wg.Add(1)
			go func(c *nfsclient.Conn) {
				defer wg.Done()
				for {
					off := int(next.Add(req)) - req
					if off >= len(data) {
						return
					}
					if err := c.ReadFull(fh, uint64(off), back[off:min(off+req, len(data))]); err != nil {
						errs <- err
						next.Store(int64(len(data)))
						return
					}
				}
			}(conns[w%4])
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return nil, err
		}
		rates = append(rates, float64(len(data))/(1<<20)/time.Since(start).Seconds())
	}
	return rates, nil
}

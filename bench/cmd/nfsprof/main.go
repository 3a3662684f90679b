// Command nfsprof runs the branchnfs NFS server in-process over a fresh
// store and drives one workload against it over loopback, with CPU, heap,
// mutex and block profiles on. It is the "pprof on the server" of
// docs/benchmarks.md: the client's own cost shows up under bench/nfsclient
// and can be told apart from nfsserver, cowfs and kv.
//
//	go run ./bench/cmd/nfsprof -workload seq -size-mib 256 -out /tmp/prof
//	go tool pprof -top /tmp/prof/cpu.prof
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
	"time"

	"github.com/branchnfs/branchnfs/bench/branchops"
	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/nfsserver"
)

func main() {
	wl := flag.String("workload", "seq", "seq or meta")
	size := flag.Int("size-mib", 256, "seq: file size")
	files := flag.Int("files", 10000, "meta: files")
	runs := flag.Int("runs", 2, "workload runs (the first warms up)")
	out := flag.String("out", "/tmp/nfsprof", "directory for the profiles")
	flag.Parse()
	if err := run(*wl, *size, *files, *runs, *out); err != nil {
		fmt.Fprintln(os.Stderr, "nfsprof:", err)
		os.Exit(1)
	}
}

func run(wl string, sizeMiB, files, runs int, out string) error {
	ctx := context.Background()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nfsprof")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := branchops.Open(ctx, dir)
	if err != nil {
		return err
	}
	defer st.Close()
	srv, err := nfsserver.New(nfsserver.Options{Branches: st.M, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
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

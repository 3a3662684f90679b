// Command nfsbench benchmarks branchnfs against nfs-ganesha and go-nfs's
// osnfs. "nfsbench run" is the whole suite (scripts/bench calls it); "seq"
// and "meta" drive one workload against any NFSv3 export.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"
)

const usage = `usage:
  nfsbench run  [flags]   the whole suite: starts the servers, prints a Markdown table, writes JSON
  nfsbench seq  [flags]   sequential write+read of one file against an export
  nfsbench meta [flags]   small-file create/stat/list/remove against an export
Run "nfsbench CMD -h" for the flags of CMD.`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	// NFSBENCH_PROFILE_DIR=DIR writes cpu, heap, mutex and block profiles
	// of this process (client side, and the in-process sections) to DIR.
	if dir := os.Getenv("NFSBENCH_PROFILE_DIR"); dir != "" {
		runtime.SetMutexProfileFraction(5)
		runtime.SetBlockProfileRate(int(100 * time.Microsecond))
		if out, err := os.Create(filepath.Join(dir, "cpu.prof")); err == nil {
			pprof.StartCPUProfile(out)
			defer writeProfiles(dir)
		}
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runSuite(os.Args[2:])
	case "seq":
		err = runSeq(os.Args[2:])
	case "meta":
		err = runMeta(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nfsbench:", err)
		if dir := os.Getenv("NFSBENCH_PROFILE_DIR"); dir != "" {
			writeProfiles(dir)
		}
		os.Exit(1)
	}
}

func writeProfiles(dir string) {
	pprof.StopCPUProfile()
	for _, name := range []string{"heap", "mutex", "block"} {
		if f, err := os.Create(filepath.Join(dir, name+".prof")); err == nil {
			pprof.Lookup(name).WriteTo(f, 0)
			f.Close()
		}
	}
}

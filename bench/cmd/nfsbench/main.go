// Command nfsbench benchmarks branchnfs against nfs-ganesha and go-nfs's
// osnfs. "nfsbench run" is the whole suite (scripts/bench calls it); "seq"
// and "meta" drive one workload against any NFSv3 export.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"
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
	if f := os.Getenv("NFSBENCH_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err == nil {
			pprof.StartCPUProfile(out)
			defer pprof.StopCPUProfile()
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
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

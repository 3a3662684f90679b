package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/workload"
)

// targetFlags registers the flags naming an NFS export.
func targetFlags(fs *flag.FlagSet) *nfsclient.Target {
	t := &nfsclient.Target{}
	fs.StringVar(&t.Host, "host", "127.0.0.1", "server address")
	fs.IntVar(&t.NFSPort, "port", 12049, "NFS port")
	fs.IntVar(&t.MountPort, "mountport", 0, "MOUNT port (default: the NFS port)")
	fs.StringVar(&t.Export, "export", "/main", "export path to MOUNT")
	return t
}

func fixTarget(t *nfsclient.Target) {
	if t.MountPort == 0 {
		t.MountPort = t.NFSPort
	}
}

func printJSON(v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(b))
}

// runSeq: nfsbench seq [flags] — one sequential write+read against an export.
func runSeq(args []string) error {
	fs := flag.NewFlagSet("seq", flag.ExitOnError)
	t := targetFlags(fs)
	size := fs.Int("size-mib", 256, "file size in MiB")
	req := fs.Int("req", 1<<20, "request size in bytes")
	conns := fs.Int("conns", 4, "TCP connections")
	depth := fs.Int("depth", 2, "requests in flight per connection")
	name := fs.String("name", "nfsbench-seq.bin", "file name in the export root")
	fs.Parse(args)
	fixTarget(t)
	data := workload.Data(1, *size<<20)
	r, err := workload.Seq(*t, data, workload.SeqOptions{Name: *name, ReqSize: *req, Conns: *conns, Depth: *depth})
	printJSON(r)
	return err
}

// runMeta: nfsbench meta [flags] — small-file create/stat/list/remove.
func runMeta(args []string) error {
	fs := flag.NewFlagSet("meta", flag.ExitOnError)
	t := targetFlags(fs)
	files := fs.Int("files", 10000, "number of files")
	size := fs.Int("file-size", 1024, "bytes per file")
	workers := fs.Int("workers", 4, "parallel workers, one connection each")
	dir := fs.String("dir", fmt.Sprintf("nfsbench-meta-%d", os.Getpid()), "directory created in the export root")
	fs.Parse(args)
	fixTarget(t)
	r, err := workload.Meta(*t, workload.MetaOptions{Dir: *dir, Files: *files, FileSize: *size, Workers: *workers})
	printJSON(r)
	return err
}

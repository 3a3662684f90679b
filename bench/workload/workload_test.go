package workload_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/branchnfs/branchnfs/bench/branchops"
	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/nfsserver"
)

// startServer serves a fresh store in-process and returns the target of
// branch main.
func startServer(t *testing.T) nfsclient.Target {
	t.Helper()
	ctx := context.Background()
	st, err := branchops.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := nfsserver.New(nfsserver.Options{Branches: st.M, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ctx, ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	return nfsclient.Target{Host: "127.0.0.1", NFSPort: port, MountPort: port, Export: "/main"}
}

func TestData(t *testing.T) {
	a, b := workload.Data(1, 1000), workload.Data(1, 1000)
	if !bytes.Equal(a, b) {
		t.Fatal("Data is not deterministic")
	}
	if bytes.Equal(a, workload.Data(2, 1000)) {
		t.Fatal("Data ignores its seed")
	}
	if !bytes.Equal(workload.Data(1, 1003)[:1000], a) {
		t.Fatal("Data of a longer length does not extend the shorter one")
	}
}

// TestStamp: stamped content differs from the base and from other salts
// in every 4 KiB (so in every block a store could find again), and is the
// base elsewhere.
func TestStamp(t *testing.T) {
	base := workload.Data(1, 64<<10+100)
	a, b := make([]byte, len(base)), make([]byte, len(base))
	workload.Stamp(a, base, 1)
	workload.Stamp(b, base, 2)
	for i := 0; i < len(base); i += 4096 {
		end := min(i+4096, len(base))
		if bytes.Equal(a[i:end], base[i:end]) || bytes.Equal(a[i:end], b[i:end]) {
			t.Fatalf("the 4 KiB at %d is the same with salt 1 as with the base or salt 2", i)
		}
		if k := min(i+8, end); !bytes.Equal(a[k:end], base[k:end]) {
			t.Fatalf("the 4 KiB at %d changed past its stamp", i)
		}
	}
}

func TestSeqAndMetaAgainstBranchnfs(t *testing.T) {
	tg := startServer(t)
	data := workload.Data(3, 3<<20+123) // not a multiple of the request size
	r, err := workload.Seq(tg, data, workload.SeqOptions{Name: "s.bin", ReqSize: 1 << 20, Conns: 2, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !r.ChecksumMatch || r.Bytes != int64(len(data)) || r.WriteMiBps <= 0 || r.ReadMiBps <= 0 {
		t.Fatalf("Seq = %+v", r)
	}
	// A CPU clock that advances 1.2 ms per sample: each phase is one
	// sample apart, so every phase costs 1.2 ms over its 120 operations.
	var clock float64
	cpu := func() float64 { clock += 0.0012; return clock }
	m, err := workload.Meta(tg, workload.MetaOptions{Dir: "m", Files: 120, FileSize: 1024, Workers: 3, CPU: cpu})
	if err != nil {
		t.Fatal(err)
	}
	if m.CreateOps <= 0 || m.StatOps <= 0 || m.ListOps <= 0 || m.RemoveOps <= 0 {
		t.Fatalf("Meta = %+v", m)
	}
	for _, v := range []float64{m.CreateCPU, m.StatCPU, m.ListCPU, m.RemoveCPU} {
		if v < 9.99 || v > 10.01 {
			t.Fatalf("Meta CPU per op = %v / %v / %v / %v µs, want 10 each", m.CreateCPU, m.StatCPU, m.ListCPU, m.RemoveCPU)
		}
	}
	// The workloads clean up after themselves: the file is gone and the
	// directory is empty.
	c, err := nfsclient.Dial(tg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Lookup(c.Root, "s.bin"); !nfsclient.IsStatus(err, 2) {
		t.Fatalf("lookup of the removed file: %v, want NFS3ERR_NOENT", err)
	}
	dir, _, err := c.Lookup(c.Root, "m")
	if err != nil {
		t.Fatal(err)
	}
	ents, _, err := c.ReadDirPlus(dir, 8192)
	if err != nil || len(ents) != 0 {
		t.Fatalf("meta dir after remove: %d entries, err %v", len(ents), err)
	}
}

func TestSeqFailsOnMissingExport(t *testing.T) {
	tg := startServer(t)
	tg.Export = "/nope"
	if _, err := workload.Seq(tg, workload.Data(1, 10), workload.SeqOptions{Name: "x", ReqSize: 1 << 20, Conns: 1, Depth: 1}); err == nil {
		t.Fatal("Seq against a missing export succeeded")
	}
}

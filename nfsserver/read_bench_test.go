package nfsserver

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkReadDepth measures 1 MiB READs of a file in order, one at a
// time (as nfs-cp sends them: the READ's latency is the figure), of the
// file in the branch's own top layer (depth=0) and of the file three
// layers down (depth=3: written in main, then three forks deep).
// store=mem is a 32 MiB file in an in-memory store, whose values stay in
// the LSM tree; store=disk a 128 MiB file in a store on disk, whose blocks
// are read from the value log as the server reads them. cpu-ns/op is the
// process's CPU time (server and client: they run in this process) per
// READ, from getrusage.
func BenchmarkReadDepth(b *testing.B) {
	for _, store := range []string{"mem", "disk"} {
		for _, depth := range []int{0, 3} {
			b.Run(fmt.Sprintf("store=%s/depth=%d", store, depth), func(b *testing.B) { benchmarkReadDepth(b, store == "disk", depth) })
		}
	}
}

func benchmarkReadDepth(b *testing.B, disk bool, depth int) {
	fileMiB := 32
	dir := ""
	if disk {
		fileMiB, dir = 128, b.TempDir()
	}
	ctx := context.Background()
	m := newManager(b, dir)
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	k := c.as(authRoot)
	fh, _, st := k.create(c.mnt("/main"), "big", 1, sa{})
	must(b, st, "create")
	chunk := make([]byte, maxIO)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for i := range fileMiB {
		for j := 0; j < maxIO; j += 4096 {
			chunk[j] = byte(i) // no two blocks alike
			chunk[j+1] = byte(j >> 12)
		}
		_, _, _, st := k.write(fh, uint64(i*maxIO), chunk, unstable)
		must(b, st, "write")
	}
	parent := "main"
	for i := range depth {
		name := fmt.Sprintf("d%d", i+1)
		if _, err := m.Fork(ctx, parent, name); err != nil {
			b.Fatal(err)
		}
		parent = name
	}
	if depth > 0 {
		fh, _, st = k.lookup(c.mnt("/"+parent), "big")
		must(b, st, "lookup")
	}
	b.SetBytes(maxIO)
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := range b.N {
		readMiB(b, c, fh, uint64(i%fileMiB)*maxIO)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// readMiB reads maxIO bytes of fh at off with one READ over c, and fails
// b unless they all come back.
func readMiB(b *testing.B, c *rawClient, fh []byte, off uint64) {
	d := c.nfs(6, authRoot, args(fh, off, uint32(maxIO)))
	if d.u32() != 0 {
		b.Fatal("READ failed")
	}
	readPostOp(d)
	if n := d.u32(); n != maxIO {
		b.Fatalf("READ returned %d bytes", n)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

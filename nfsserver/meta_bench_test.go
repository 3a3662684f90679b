package nfsserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkMetaOps measures the metadata procedures of the bench's meta
// section over the RPC path: LOOKUP of a file, READDIRPLUS of the whole
// directory (an op is the listing; cpu-ns/entry is per entry), and REMOVE, with 4 requests in flight on one connection,
// in main after a fork (stack=forked: its top over the frozen layer the
// fork left, as in scripts/bench) or never forked (stack=top). The
// directory holds 4096 files of 1 KiB, created untimed (and, for REMOVE,
// the b.N files removed). cpu-ns/op is the process's CPU time (server and
// client: both run in this process) per operation, from getrusage, the
// figure the bench's server CPU per operation tracks; B/op and allocs/op
// do not move with the machine's load, so they tell two builds apart
// where the CPU figures are noise.
func BenchmarkMetaOps(b *testing.B) {
	for _, stack := range []string{"top", "forked"} {
		for _, op := range []string{"lookup", "readdirplus", "remove"} {
			b.Run(fmt.Sprintf("stack=%s/op=%s", stack, op), func(b *testing.B) { benchmarkMetaOp(b, stack == "forked", op) })
		}
	}
}

func benchmarkMetaOp(b *testing.B, forked bool, op string) {
	const files, inflight = 4096, 4
	m := newManager(b, "")
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	k := c.as(authRoot)
	root := c.mnt("/main")
	if forked {
		_, _, st := k.create(root, "inherited", 1, sa{mode: u32p(0o644)})
		must(b, st, "create inherited")
		if _, err := m.Fork(context.Background(), "main", "d1"); err != nil {
			b.Fatal(err)
		}
	}
	dir, _, st := k.mkdir(root, "meta", 0o755)
	must(b, st, "mkdir")
	content := make([]byte, 1024)
	name := func(i int) string { return fmt.Sprintf("f%06d", i) }
	create := func(n string) {
		fh, _, st := k.create(dir, n, 1, sa{mode: u32p(0o644)})
		must(b, st, "create "+n)
		_, _, _, st = k.write(fh, 0, content, 2)
		must(b, st, "write "+n)
	}
	for i := range files {
		create(name(i))
	}
	// each runs one operation; i counts from 0 across the benchmark.
	var each func(i int) error
	switch op {
	case "lookup":
		each = func(i int) error {
			if _, _, st := k.lookup(dir, name(i%files)); st != 0 {
				return fmt.Errorf("LOOKUP: %v", st)
			}
			return nil
		}
	case "readdirplus":
		each = func(int) error {
			if n := len(k.readdirAll(dir, 64<<10, true)); n != files+2 { // with . and ..
				return fmt.Errorf("READDIRPLUS: %d entries, want %d", n, files+2)
			}
			return nil
		}
	case "remove":
		for i := range b.N {
			create(fmt.Sprintf("r%07d", i))
		}
		each = func(i int) error {
			if st := k.remove(dir, fmt.Sprintf("r%07d", i)); st != 0 {
				return fmt.Errorf("REMOVE: %v", st)
			}
			return nil
		}
	}

	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := each(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := float64(cpuTime(b) - cpu0)
	b.ReportMetric(cpu/float64(b.N), "cpu-ns/op")
	if op == "readdirplus" {
		b.ReportMetric(cpu/float64(b.N*files), "cpu-ns/entry")
	}
}

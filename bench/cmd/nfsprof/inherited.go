package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"

	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// countingStore counts the transactions, point reads (Get, GetFunc, Has)
// and key iterations (Iterate calls, and the keys they pass on) of a
// kv.Store's View and Update calls, and apart the block reference keys
// read of the layers in watch (cowfs's layout: 'l' layer(8) 'd' ...),
// which other clients' work does not touch.
type countingStore struct {
	kv.Store
	txns, points, iters, keys atomic.Int64
	watch                     atomic.Pointer[map[uint64]bool]
	watched                   atomic.Int64
}

// note counts k if it is a block reference key of a watched layer.
func (c *countingStore) note(k []byte) {
	if w := c.watch.Load(); w != nil && len(k) > 9 && k[0] == 'l' && k[9] == 'd' && (*w)[binary.BigEndian.Uint64(k[1:9])] {
		c.watched.Add(1)
	}
}

func (c *countingStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	c.txns.Add(1)
	return c.Store.View(ctx, func(tx kv.Txn) error { return fn(countingTxn{tx, c}) })
}

func (c *countingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	c.txns.Add(1)
	return c.Store.Update(ctx, func(tx kv.Txn) error { return fn(countingTxn{tx, c}) })
}

// storeReads is what a countingStore counted.
type storeReads struct{ txns, points, iters, keys, watched int64 }

func (c *countingStore) snapshot() storeReads {
	return storeReads{c.txns.Load(), c.points.Load(), c.iters.Load(), c.keys.Load(), c.watched.Load()}
}

type countingTxn struct {
	kv.Txn
	c *countingStore
}

func (t countingTxn) Get(k []byte) ([]byte, error) {
	t.c.points.Add(1)
	t.c.note(k)
	return t.Txn.Get(k)
}

func (t countingTxn) GetFunc(k []byte, fn func([]byte) error) error {
	t.c.points.Add(1)
	t.c.note(k)
	return t.Txn.GetFunc(k, fn)
}

func (t countingTxn) Has(k []byte) (bool, error) {
	t.c.points.Add(1)
	return t.Txn.Has(k)
}

func (t countingTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	t.c.iters.Add(1)
	return t.Txn.Iterate(prefix, start, keysOnly, func(k, v []byte) (bool, error) {
		t.c.keys.Add(1)
		t.c.note(k)
		return fn(k, v)
	})
}

// inheritedRun is one run of -workload read-inherited.
type inheritedRun struct {
	MainMiBs  float64 `json:"main_mib_s"`
	D3MiBs    float64 `json:"d3_mib_s"`
	Ratio     float64 `json:"d3_vs_main"`
	MainPerOp string  `json:"main_per_read"`
	D3PerOp   string  `json:"d3_per_read"`
	// D3Frozen is the block reference keys of d3's frozen layers read
	// per READ of d3.
	D3Frozen float64 `json:"d3_frozen_refs_per_read"`
}

// profileInherited writes data to inherited.bin in main, forks d1, d2 and
// d3 (each from the one before), writes the same bytes to top.bin in main
// (its top layer), and reads top.bin through main's export and then
// inherited.bin through d3's, runs times, with the CPU profiled over the
// reads.
func profileInherited(ctx context.Context, m *branches.Manager, counts *countingStore, t nfsclient.Target, data []byte, runs int, churn bool, cpuf *os.File) ([]inheritedRun, error) {
	if err := writeFile(t, "inherited.bin", data); err != nil {
		return nil, err
	}
	parent := "main"
	for _, b := range []string{"d1", "d2", "d3"} {
		if _, err := m.Fork(ctx, parent, b); err != nil {
			return nil, err
		}
		parent = b
	}
	// The same bytes written after the forks: in main's top layer.
	if err := writeFile(t, "top.bin", data); err != nil {
		return nil, err
	}
	d3 := t
	d3.Export = "/d3"
	v, _, err := m.View("d3")
	if err != nil {
		return nil, err
	}
	frozen := map[uint64]bool{}
	for _, l := range v.Stack()[1:] {
		frozen[uint64(l)] = true
	}
	counts.watch.Store(&frozen)
	stop := func() error { return nil }
	if churn {
		stop = startChurn(ctx, m, t)
	}
	o := workload.SeqOptions{ReqSize: 1 << 20, Conns: 4, Depth: 2}
	reads := int64((len(data) + o.ReqSize - 1) / o.ReqSize)
	per := func(a, b storeReads) string {
		return fmt.Sprintf("%.2f txns, %.2f point reads, %.2f iterations over %.2f keys",
			float64(b.txns-a.txns)/float64(reads), float64(b.points-a.points)/float64(reads),
			float64(b.iters-a.iters)/float64(reads), float64(b.keys-a.keys)/float64(reads))
	}
	pprof.StartCPUProfile(cpuf)
	defer pprof.StopCPUProfile()
	var out []inheritedRun
	for range max(runs, 1) {
		var r inheritedRun
		c0 := counts.snapshot()
		mv, err := workload.ReadExisting(t, "top.bin", data, o)
		if err != nil {
			stop()
			return nil, fmt.Errorf("main: %w", err)
		}
		c1 := counts.snapshot()
		dv, err := workload.ReadExisting(d3, "inherited.bin", data, o)
		if err != nil {
			stop()
			return nil, fmt.Errorf("d3: %w", err)
		}
		c2 := counts.snapshot()
		r.MainMiBs, r.D3MiBs, r.Ratio = mv, dv, dv/mv
		r.MainPerOp, r.D3PerOp = per(c0, c1), per(c1, c2)
		r.D3Frozen = float64(c2.watched-c1.watched) / float64(reads)
		out = append(out, r)
	}
	if err := stop(); err != nil {
		return nil, fmt.Errorf("churn: %w", err)
	}
	return out, nil
}

// writeFile writes data to the export's root as name, in 1 MiB WRITEs.
func writeFile(t nfsclient.Target, name string, data []byte) error {
	c, err := nfsclient.Dial(t)
	if err != nil {
		return err
	}
	defer c.Close()
	fh, err := c.Create(c.Root, name, 0o644)
	if err != nil {
		return err
	}
	const req = 1 << 20
	for off := 0; off < len(data); off += req {
		if err := c.WriteFull(fh, uint64(off), data[off:min(off+req, len(data))], nfsclient.Unstable); err != nil {
			return err
		}
	}
	return c.Commit(fh)
}

// startChurn writes and removes 8 MiB files in main and runs a GC after
// each, until the returned stop is called; stop returns the first error.
func startChurn(ctx context.Context, m *branches.Manager, t nfsclient.Target) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var first error
	wg.Add(1)
	go func() {
		defer wg.Done()
		data := workload.Data(2, 8<<20)
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("churn%d.bin", i%2)
			if err := writeFile(t, name, data); err != nil {
				first = err
				return
			}
			if _, err := m.GC(ctx); err != nil && ctx.Err() == nil {
				first = err
				return
			}
		}
	}()
	return func() error {
		cancel()
		wg.Wait()
		return first
	}
}

package nfsserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	nfs "github.com/willscott/go-nfs"
)

// BenchmarkReadInherited measures 1 MiB READs of a 32 MiB file in order,
// one at a time, on a store on disk: the file three forks down from main,
// where it was written (file=inherited-depth3), against the same bytes
// written in main's top layer after the forks (file=top). With
// reclaim=busy, another branch's files are written and GC runs in a loop
// meanwhile, as the background reclaimer does while other clients work:
// its rechunks change block references of layers the READs do not go
// through. cpu-ns/op is the process's CPU time per READ (the churn's
// included).
func BenchmarkReadInherited(b *testing.B) {
	for _, busy := range []bool{false, true} {
		for _, file := range []string{"top", "inherited-depth3"} {
			name := map[bool]string{false: "quiet", true: "busy"}[busy]
			b.Run(fmt.Sprintf("reclaim=%s/file=%s", name, file), func(b *testing.B) {
				benchmarkReadInherited(b, file == "top", busy)
			})
		}
	}
}

func benchmarkReadInherited(b *testing.B, top, busy bool) {
	const fileMiB = 32
	ctx := context.Background()
	m := newManager(b, b.TempDir())
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	k := c.as(authRoot)
	write := func(export, name string) []byte {
		fh, _, st := k.create(c.mnt(export), name, 1, sa{})
		must(b, st, "create")
		data := make([]byte, fileMiB*maxIO)
		rand.NewChaCha8([32]byte{1}).Read(data) // chunks of their own, as real files
		for i := range fileMiB {
			_, _, _, st := k.write(fh, uint64(i*maxIO), data[i*maxIO:(i+1)*maxIO], unstable)
			must(b, st, "write")
		}
		return fh
	}
	fh := write("/main", "inherited")
	parent := "main"
	for _, name := range []string{"d1", "d2", "d3"} {
		if _, err := m.Fork(ctx, parent, name); err != nil {
			b.Fatal(err)
		}
		parent = name
	}
	if _, err := m.Fork(ctx, "main", "side"); err != nil {
		b.Fatal(err)
	}
	if top {
		fh = write("/main", "top")
	} else {
		var st nfs.NFSStatus
		fh, _, st = k.lookup(c.mnt("/d3"), "inherited")
		must(b, st, "lookup")
	}
	if _, err := m.GC(ctx); err != nil { // rechunk both files now, not meanwhile
		b.Fatal(err)
	}
	read := func(i int) { readMiB(b, c, fh, uint64(i%fileMiB)*maxIO) }
	for i := range fileMiB { // warm: the figures are of later passes
		read(i)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	if busy {
		v, _, err := m.View("side")
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			churn(b, ctx, m, v, stop)
		}()
	}
	b.SetBytes(maxIO)
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := range b.N {
		read(i)
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// churn writes 2 MiB files of new bytes into v (a branch's view), each
// replacing the one before, and runs GC after each, which rechunks it,
// until stop is closed.
func churn(b *testing.B, ctx context.Context, m *branches.Manager, v *cowfs.View, stop <-chan struct{}) {
	data := make([]byte, 2<<20)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		for j := range data {
			data[j] = byte(i*31 + j*j>>7)
		}
		if i > 0 {
			if err := v.Unlink(cowfs.RootIno, "churn"); err != nil {
				b.Error(err)
				return
			}
		}
		a, err := v.Create(cowfs.RootIno, "churn", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
		if err == nil {
			_, err = v.WriteAt(a.Ino, data, 0)
		}
		if err == nil {
			_, err = m.GC(ctx)
		}
		if err != nil {
			b.Error(err)
			return
		}
	}
}

package cowfs

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// BenchmarkReadSeqDisk measures 1 MiB reads, in order, of a 128 MiB file
// of 32 KiB blocks just written with 1 MiB writes (plain stored blocks,
// not rechunked: what a client reads back after writing), in the branch's
// own top layer, on Badger on disk, whose blocks are read from its value
// log. blocks=whole reads at block boundaries, blocks=offset 4 KiB past
// them (the first and last block partial). cpu-ns/op is the process's
// CPU time per read, from getrusage.
func BenchmarkReadSeqDisk(b *testing.B) {
	for _, shift := range []int{0, 4096} {
		name := "whole"
		if shift != 0 {
			name = "offset"
		}
		b.Run("blocks="+name, func(b *testing.B) { benchmarkReadSeqDisk(b, shift) })
	}
}

func benchmarkReadSeqDisk(b *testing.B, shift int) {
	const size, req = 128 << 20, 1 << 20
	st, err := kv.OpenBadger(b.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	_, f := newTestTree(b, st, Options{BlockSize: 32 << 10})
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, req)
	rng := rand.NewChaCha8([32]byte{9})
	for off := 0; off < size; off += req {
		rng.Read(chunk)
		if _, err := f.WriteAt(a.Ino, chunk, int64(off)); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, req)
	b.SetBytes(req)
	cpu0 := seqCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(i%(size/req-1))*req + int64(shift)
		if n, _, err := f.ReadAt(a.Ino, buf, off); err != nil || n != req {
			b.Fatal(fmt.Sprint(n, err))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(seqCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// seqCPU is the process's user and system CPU time so far, in ns.
func seqCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

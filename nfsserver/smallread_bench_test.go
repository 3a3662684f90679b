package nfsserver

import (
	"fmt"
	"testing"
)

// BenchmarkReadSmallFiles replays the read step of the kernel client's
// tree workload, one call at a time: each iteration READs the whole of
// one of 1,000 files of 9 KiB (the tree's average), written before on a
// disk-backed store, cycling through them.
func BenchmarkReadSmallFiles(b *testing.B) {
	const files, size = 1000, 9 << 10
	k, dir := treeOnDisk(b)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 13)
	}
	fhs := make([][]byte, files)
	for i := range fhs {
		data[0] = byte(i)
		fh, _, st := k.create(dir, fmt.Sprintf("f%d.go", i), 1, sa{mode: u32p(0o644)})
		must(b, st, "create")
		_, _, _, st = k.write(fh, 0, data, fileSync)
		must(b, st, "write")
		fhs[i] = fh
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, _, st := k.read(fhs[i%files], 0, 32<<10)
		must(b, st, "read")
		if len(got) != size {
			b.Fatalf("read %d bytes, want %d", len(got), size)
		}
	}
}

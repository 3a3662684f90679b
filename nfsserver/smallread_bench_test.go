package nfsserver

import (
	"fmt"
	"testing"
)

// BenchmarkReadSmallFiles replays the read step of the kernel client's
// tree workload, one call at a time: each iteration READs the whole of
// one of 1,000 files, written before on a disk-backed store, cycling
// through them. size=9KiB is the tree's average, its content in the value
// log; size=3KiB is below the store's value threshold (8 KiB), like most
// of the tree's files, its content in Badger's tree.
func BenchmarkReadSmallFiles(b *testing.B) {
	for _, size := range []int{3 << 10, 9 << 10} {
		b.Run(fmt.Sprintf("size=%dKiB", size>>10), func(b *testing.B) { benchReadSmallFiles(b, size) })
	}
}

func benchReadSmallFiles(b *testing.B, size int) {
	const files = 1000
	k, dir := treeOnDisk(b)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 13)
	}
	fhs := make([][]byte, files)
	for i := range fhs {
		data[0], data[1] = byte(i), byte(i>>8) // content of its own
		fh, _, st := k.create(dir, fmt.Sprintf("f%d.go", i), 1, sa{mode: u32p(0o644)})
		must(b, st, "create")
		_, _, _, st = k.write(fh, 0, data, fileSync)
		must(b, st, "write")
		fhs[i] = fh
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, _, st := k.read(fhs[i%files], 0, 32<<10)
		must(b, st, "read")
		if len(got) != size {
			b.Fatalf("read %d bytes, want %d", len(got), size)
		}
	}
}

package nfsserver

import (
	"fmt"
	"testing"
)

// BenchmarkUntarFile replays, one file per iteration, the calls the Linux
// client sends for each file of a tar xf (counted from the server side by
// tests/kernel's BenchmarkKernelTree): a negative LOOKUP, CREATE, one
// FILE_SYNC WRITE of the whole file at close, four SETATTRs (tar's chown,
// chmod and utimes, and the client's own), and two LOOKUPs. It runs on a
// disk-backed store, so the FILE_SYNC WRITE includes a real fsync.
func BenchmarkUntarFile(b *testing.B) {
	k, dir := treeOnDisk(b)
	data := make([]byte, 8<<10)
	for i := range data {
		data[i] = byte(i)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("f%d.go", i)
		if _, _, st := k.lookup(dir, name); st == 0 {
			b.Fatalf("%s exists", name)
		}
		fh, _, st := k.create(dir, name, 1, sa{mode: u32p(0o644)})
		must(b, st, "create")
		_, _, _, st = k.write(fh, 0, data, fileSync)
		must(b, st, "write")
		must(b, k.setattr(fh, sa{uid: u32p(0), gid: u32p(0)}), "chown")
		must(b, k.setattr(fh, sa{mode: u32p(0o644)}), "chmod")
		must(b, k.setattr(fh, sa{atimeHow: setToClientTime, mtimeHow: setToClientTime, atime: [2]uint32{1, 0}, mtime: [2]uint32{1, 0}}), "utimes")
		must(b, k.setattr(fh, sa{mode: u32p(0o644)}), "chmod")
		for range 2 {
			_, _, st := k.lookup(dir, name)
			must(b, st, "lookup")
		}
	}
}

// treeOnDisk serves a disk-backed store and returns a root caller and the
// handle of a new directory "tree" in main, for the benchmarks that replay
// the kernel client's tree workload.
func treeOnDisk(b *testing.B) (caller, []byte) {
	b.Helper()
	m := newManager(b, b.TempDir())
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	dir, _, st := k.mkdir(root, "tree", 0o755)
	must(b, st, "mkdir")
	return k, dir
}

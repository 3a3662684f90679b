package nfsserver

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
)

// BenchmarkReaddirAttrs measures reading the attributes of a READDIRPLUS
// batch of 1,000 entries: one GetAttr transaction per entry over all cores
// (how READDIRPLUS read them before GetAttrs), GetAttrs in one transaction,
// and GetAttrs split over all cores; with the files in the branch's top
// layer and one fork down (frozen).
func BenchmarkReaddirAttrs(b *testing.B) {
	m := newManager(b, b.TempDir())
	fs, _, err := m.View("main")
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if _, err := fs.Create(cowfs.RootIno, fmt.Sprintf("file-%04d.go", i), cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0); err != nil {
			b.Fatal(err)
		}
	}
	for _, frozen := range []bool{false, true} {
		if frozen {
			if _, err := m.Fork(b.Context(), "main", "kid"); err != nil {
				b.Fatal(err)
			}
		}
		ents, _, err := fs.ReadDir(cowfs.RootIno, 0, 1000)
		if err != nil || len(ents) != 1000 {
			b.Fatalf("ReadDir: %d entries, %v", len(ents), err)
		}
		for _, c := range []struct {
			name string
			fn   func() []*cowfs.Attr
		}{
			{"getattr-each-cores", func() []*cowfs.Attr { return attrsEach(fs, ents) }},
			{"getattrs-one", func() []*cowfs.Attr { return attrsOfSplit(fs, ents, 1) }},
			{"getattrs-cores", func() []*cowfs.Attr { return attrsOfSplit(fs, ents, runtime.GOMAXPROCS(0)) }},
		} {
			b.Run(fmt.Sprintf("frozen=%v/way=%s", frozen, c.name), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if a := c.fn(); a[999] == nil {
						b.Fatal("no attributes")
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ents)), "ns/entry")
			})
		}
	}
}

// attrsEach is how READDIRPLUS read a batch's attributes before GetAttrs:
// a GetAttr transaction per entry, over up to GOMAXPROCS goroutines.
func attrsEach(fs *cowfs.View, ents []cowfs.DirEntry) []*cowfs.Attr {
	out := make([]*cowfs.Attr, len(ents))
	get := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if a, err := fs.GetAttr(ents[i].Ino); err == nil {
				out[i] = &a
			}
		}
	}
	splitRange(len(ents), min(runtime.GOMAXPROCS(0), len(ents)/attrsPerWorker), get)
	return out
}

// BenchmarkListTree replays what the Linux client sends for `ls -lR` of a
// source tree after dropping its caches, one call at a time over one
// connection: per directory an ACCESS, a GETATTR and READDIRPLUS calls of
// the size the client asks first (dircount 512, maxcount 4,096) until the
// end of the directory. The tree is 110 directories of 11 files each (the
// shape of Go's src/crypto) in a disk store.
func BenchmarkListTree(b *testing.B) {
	m := newManager(b, b.TempDir())
	fs, _, err := m.View("main")
	if err != nil {
		b.Fatal(err)
	}
	var dirs []cowfs.InodeID
	for i := 0; i < 110; i++ {
		d, err := fs.Mkdir(cowfs.RootIno, fmt.Sprintf("dir%03d", i), cowfs.NewAttr{Mode: 0o755})
		if err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, d.Ino)
		for j := 0; j < 11; j++ {
			if _, err := fs.Create(d.Ino, fmt.Sprintf("file_%02d_test.go", j), cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	_, addr := startServer(b, m, nil)
	c := dialRaw(b, addr)
	root := c.mnt("/main")
	var handles [][]byte
	for i := range dirs {
		d := c.nfs(3, authRoot, args(root, fmt.Sprintf("dir%03d", i)))
		if st := d.u32(); st != 0 {
			b.Fatalf("LOOKUP: %d", st)
		}
		handles = append(handles, append([]byte(nil), d.opaque(fhSize)...))
	}
	b.ResetTimer()
	calls := 0
	for i := 0; i < b.N; i++ {
		for _, fh := range handles {
			if c.nfs(4, authRoot, args(fh, uint32(0x1f))).u32() != 0 || c.nfs(1, authRoot, args(fh)).u32() != 0 {
				b.Fatal("ACCESS or GETATTR failed")
			}
			calls += 2
			cookie, eof := uint64(0), false
			for !eof {
				d := c.nfs(17, authRoot, args(fh, cookie, [8]byte{}, uint32(512), uint32(4096)))
				calls++
				if d.u32() != 0 {
					b.Fatal("READDIRPLUS failed")
				}
				readPostOp(d)
				d.fixed(8)
				for d.bool() {
					d.u64()
					d.string(maxNameXDR)
					cookie = d.u64()
					readPostOp(d)
					if d.bool() {
						d.opaque(fhSize)
					}
				}
				eof = d.bool()
				if d.err != nil {
					b.Fatal(d.err)
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(calls), "us/call")
}

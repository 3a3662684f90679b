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

package cowfs

import (
	"fmt"
	"testing"
)

// BenchmarkMetaPath measures the metadata reads of LOOKUP, GETATTR and a
// READDIRPLUS batch (ReadDir and every entry's attributes) in a directory
// of 1,000 files, with the files in the top layer and with them two
// frozen layers down.
func BenchmarkMetaPath(b *testing.B) {
	for _, frozen := range []int{0, 2} {
		f, _, _ := newTestFS(b, Options{})
		var inos []InodeID
		for i := 0; i < 1000; i++ {
			a, err := f.Create(RootIno, fmt.Sprintf("file-%04d.go", i), CreateGuarded, NewAttr{Mode: 0o644}, 0)
			if err != nil {
				b.Fatal(err)
			}
			inos = append(inos, a.Ino)
		}
		for range frozen {
			pushLayer(b, f)
		}
		b.Run(fmt.Sprintf("frozen=%d/op=lookup", frozen), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := f.GetAttr(RootIno); err != nil {
					b.Fatal(err)
				}
				if _, err := f.Lookup(RootIno, fmt.Sprintf("file-%04d.go", i%1000)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("frozen=%d/op=getattr", frozen), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := f.GetAttr(inos[i%1000]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("frozen=%d/op=readdirplus", frozen), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ents, _, err := f.ReadDir(RootIno, 0, 1000)
				if err != nil {
					b.Fatal(err)
				}
				readdirAttrs(b, f, ents)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/entry")
		})
	}
}

// readdirAttrs reads the attributes of every entry.
func readdirAttrs(b *testing.B, f *View, ents []DirEntry) {
	for _, e := range ents {
		if _, err := f.GetAttr(e.Ino); err != nil {
			b.Fatal(err)
		}
	}
}

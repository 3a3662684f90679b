package cowfs

import (
	"fmt"
	"testing"
)

// BenchmarkLookupName measures LOOKUP hits in a directory of 1,000 entries
// for an ASCII name (no normalization work) and an NFD name (normalized to
// NFC before hashing).
func BenchmarkLookupName(b *testing.B) {
	f, _, _ := newTestFS(b, Options{})
	for i := 0; i < 1000; i++ {
		if _, err := f.Create(RootIno, fmt.Sprintf("file-%04d.go", i), CreateGuarded, NewAttr{Mode: 0o644}, 0); err != nil {
			b.Fatal(err)
		}
	}
	const nfd = "re\u0301sume\u0301.txt"
	if _, err := f.Create(RootIno, nfd, CreateGuarded, NewAttr{Mode: 0o644}, 0); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, lookup string }{{"ascii", "file-0500.go"}, {"nfd", nfd}} {
		b.Run("name="+c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := f.Lookup(RootIno, c.lookup); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFoldName(b *testing.B) {
	for _, c := range []struct{ name, s string }{{"ascii", "file-0500.go"}, {"nfc", "r\u00e9sum\u00e9.txt"}, {"nfd", "re\u0301sume\u0301.txt"}} {
		b.Run("name="+c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_ = foldName(c.s)
			}
		})
	}
}

package importdir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
)

// benchTree writes files small files (100 per directory) under a new
// temporary directory, removed when b ends.
func benchTree(b *testing.B, files int) string {
	b.Helper()
	src, err := os.MkdirTemp("", "bnfs-bench-tree")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(src) })
	for i := 0; i < files; i++ {
		d := filepath.Join(src, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d.js", i)), []byte(fmt.Sprintf("module.exports = %d // a small file of a node_modules tree\n", i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return src
}

// BenchmarkUpdateUnchanged compares import --update over a tree where
// nothing changed (op=update) with a full import of the same tree
// (op=import): the update stats every entry and reads none.
func BenchmarkUpdateUnchanged(b *testing.B) {
	for _, files := range []int{100_000} {
		src := benchTree(b, files)
		ctx := context.Background()
		b.Run(fmt.Sprintf("op=import/files=%d", files), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				_, f := newStoreFS(b)
				b.StartTimer()
				if _, err := Import(ctx, f, cowfs.RootIno, src, Options{Cache: NewCache()}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("op=update/files=%d", files), func(b *testing.B) {
			store, f := newStoreFS(b)
			cache := NewCache()
			if _, err := Import(ctx, f, cowfs.RootIno, src, Options{Cache: cache}); err != nil {
				b.Fatal(err)
			}
			// Entries written just before the import are racy: the
			// first update reads them once.
			if _, err := Update(ctx, f, cowfs.RootIno, src, cache, Options{}); err != nil {
				b.Fatal(err)
			}
			if err := cache.Save(ctx, store); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// What the CLI does: load the cache, compare, save.
				c, err := LoadCache(ctx, store)
				if err != nil {
					b.Fatal(err)
				}
				ch, err := Update(ctx, f, cowfs.RootIno, src, c, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if len(ch.Paths) != 0 || ch.Hashed != 0 {
					b.Fatalf("update of an unchanged tree: %d changes, %d read", len(ch.Paths), ch.Hashed)
				}
				if err := c.Save(ctx, store); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

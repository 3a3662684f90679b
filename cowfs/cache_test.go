package cowfs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestInodeCacheBounded checks that the inode cache never holds more than
// Options.InodeCacheSize entries and is dropped when the view is
// invalidated.
func TestInodeCacheBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		files int
		max   int
	}{
		{"size=8", 8, 40, 8},
		{"default", 0, 40, 41}, // every file and the root
		{"disabled", -1, 40, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f, _, sto := newTestFS(t, Options{InodeCacheSize: tc.size})
			b := f.Billy()
			for i := 0; i < tc.files; i++ {
				w, err := b.Create(fmt.Sprintf("f%d", i))
				if err != nil {
					t.Fatal(err)
				}
				w.Close()
			}
			// Freeze what was written, so lookups go through the cache.
			top, err := sto.NewLayerOver(ctx, f.Top())
			if err != nil {
				t.Fatal(err)
			}
			if err := f.SetTop(top); err != nil {
				t.Fatal(err)
			}
			peak := 0
			for i := 0; i < tc.files; i++ {
				if _, err := b.Stat(fmt.Sprintf("f%d", i)); err != nil {
					t.Fatal(err)
				}
				peak = max(peak, f.CacheLen())
			}
			if peak > tc.max || (tc.max > 0 && peak == 0) {
				t.Fatalf("inode cache peaked at %d entries, want 1..%d", peak, tc.max)
			}
			f.Invalidate(errors.New("gone"))
			if n := f.CacheLen(); n != 0 {
				t.Fatalf("invalidated view keeps %d inode cache entries, want 0", n)
			}
		})
	}
}

package importdir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

func newStoreFS(t testing.TB) (kv.Store, *cowfs.View) {
	t.Helper()
	st := kvtest.NewStore(t)
	s, err := cowfs.Open(context.Background(), st, cowfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.NewTree(context.Background(), 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := s.View([]cowfs.LayerID{l})
	t.Cleanup(func() { f.Close() })
	return st, f
}

func writeFile(t testing.TB, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func changedPaths(c Changes) map[string]string {
	out := map[string]string{}
	for _, p := range c.Paths {
		out[p.Path] = p.Kind
	}
	return out
}

// TestUpdateBringsExactlyTheEdits: after an import, ten edits of every
// kind in the source (and a touch, which changes no content) come into the
// view as exactly those ten changes, reading only entries whose stat
// moved; a change made in the store to a path the source left alone stays;
// a second update finds nothing. It runs as a user who is not root.
func TestUpdateBringsExactlyTheEdits(t *testing.T) {
	testbin.Unprivileged(t, "TestUpdateBringsExactlyTheEdits", func(t *testing.T) {
		NoRacyWindow(t)
		ctx := context.Background()
		src := t.TempDir()
		for i := 0; i < 50; i++ {
			writeFile(t, filepath.Join(src, fmt.Sprintf("d%d", i%5), fmt.Sprintf("f%02d", i)), fmt.Sprintf("content %d", i))
		}
		for _, n := range []string{"a", "b", "c", "d1", "d2", "e", "g", "h"} {
			writeFile(t, filepath.Join(src, "top", n), "top "+n)
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.Symlink("a", filepath.Join(src, "top", "link")))
		store, f := newStoreFS(t)
		cache := NewCache()
		if _, err := Import(ctx, f, cowfs.RootIno, src, Options{Cache: cache}); err != nil {
			t.Fatal(err)
		}
		must(cache.Save(ctx, store))

		// The store changes h; the source leaves it alone.
		top, err := f.Lookup(cowfs.RootIno, "top")
		must(err)
		h, err := f.Lookup(top.Ino, "h")
		must(err)
		_, err = f.WriteAt(h.Ino, []byte("STORE"), 0)
		must(err)

		// Ten edits in the source, and a touch.
		p := func(n string) string { return filepath.Join(src, "top", n) }
		writeFile(t, p("a"), "top a, edited")
		writeFile(t, p("b"), "top B") // same size
		writeFile(t, p("c"), "")
		must(os.Chmod(p("e"), 0o600))
		must(os.Remove(p("link")))
		must(os.Symlink("b", p("link")))
		writeFile(t, p("n1"), "new 1")
		writeFile(t, filepath.Join(src, "d3", "n2"), "new 2")
		must(os.Mkdir(filepath.Join(src, "newdir"), 0o755))
		must(os.Remove(p("d1")))
		must(os.Remove(p("d2")))
		later := time.Now().Add(-time.Hour)
		must(os.Chtimes(p("g"), later, later))

		loaded, err := LoadCache(ctx, store)
		must(err)
		if loaded.Len() != cache.Len() {
			t.Fatalf("loaded %d cache entries, saved %d", loaded.Len(), cache.Len())
		}
		c, err := Update(ctx, f, cowfs.RootIno, src, loaded, Options{})
		must(err)
		want := map[string]string{
			"top/a": Modified, "top/b": Modified, "top/c": Modified, "top/e": Modified, "top/link": Modified,
			"top/n1": Added, "d3/n2": Added, "newdir": Added,
			"top/d1": Deleted, "top/d2": Deleted,
		}
		if got := changedPaths(c); !reflect.DeepEqual(got, want) {
			t.Fatalf("changes %v\nwant %v", got, want)
		}
		if c.Added != 3 || c.Modified != 5 || c.Deleted != 2 {
			t.Errorf("counts %+v", c)
		}
		// a, b, c, e, link and g were read; nothing else.
		if c.Hashed != 6 {
			t.Errorf("hashed %d entries, want 6", c.Hashed)
		}
		wantTree := sourceEntries(t, src)
		gotTree := viewEntries(t, f)
		delete(wantTree, "top/h")
		delete(gotTree, "top/h")
		var keys []string
		for k := range wantTree {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			w, g := wantTree[k], gotTree[k]
			if w.Type == "dir" {
				w.Mtime, g.Mtime = time.Time{}, time.Time{} // top/h's write moved top's
			}
			if !w.Mtime.Equal(g.Mtime) {
				t.Errorf("%s: mtime %v, want %v", k, g.Mtime, w.Mtime)
			}
			w.Mtime, g.Mtime = time.Time{}, time.Time{}
			if w != g {
				t.Errorf("%s:\n got %+v\nwant %+v", k, g, w)
			}
		}
		for k := range gotTree {
			if _, ok := wantTree[k]; !ok {
				t.Errorf("extra entry %s", k)
			}
		}
		buf := make([]byte, 16)
		n, _, err := f.ReadAt(h.Ino, buf, 0)
		if err != nil || string(buf[:n]) != "STORE" {
			t.Errorf("the store's change to top/h: %q, %v", buf[:n], err)
		}

		// Nothing changed since: nothing read, nothing written.
		must(loaded.Save(ctx, store))
		again, err := LoadCache(ctx, store)
		must(err)
		c, err = Update(ctx, f, cowfs.RootIno, src, again, Options{})
		must(err)
		if len(c.Paths) != 0 || c.Hashed != 0 || c.Unchanged == 0 {
			t.Errorf("second update: %+v", c)
		}
	})
}

// TestUpdateWithoutCache: with no cache (a store imported before there
// was one), an update compares with what the view holds and changes only
// what differs.
func TestUpdateWithoutCache(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "x", "same"), "same")
	writeFile(t, filepath.Join(src, "x", "other"), "other")
	_, f := newStoreFS(t)
	if _, err := Import(ctx, f, cowfs.RootIno, src, Options{}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "x", "other"), "OTHER")
	c, err := Update(ctx, f, cowfs.RootIno, src, NewCache(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := changedPaths(c); !reflect.DeepEqual(got, map[string]string{"x/other": Modified}) {
		t.Fatalf("changes %v", got)
	}
}

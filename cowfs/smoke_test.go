package cowfs

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

func newTestFS(t testing.TB, opts Options) (*View, kv.Store, *Store) {
	t.Helper()
	st := kvtest.NewStore(t)
	s, f := newTestTree(t, st, opts)
	return f, st, s
}

// newTestTree opens the Store of st and returns it with a view of a new
// tree.
func newTestTree(t testing.TB, st kv.Store, opts Options) (*Store, *View) {
	t.Helper()
	s := openStore(t, st, opts)
	l, err := s.NewTree(context.Background(), 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.View([]LayerID{l})
}

func TestSmokeLayers(t *testing.T) {
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{BlockSize: 4096})
	b := f.Billy()
	if err := b.MkdirAll("a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := b.Create("a/b/f")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Freeze and fork: child over the same base.
	base := f.Top()
	ptop, _ := sto.NewLayerOver(ctx, base)
	if err := f.SetTop(ptop); err != nil {
		t.Fatal(err)
	}
	ctop, _ := sto.NewLayerOver(ctx, base)
	c, err := sto.OpenView(ctx, ctop)
	if err != nil {
		t.Fatal(err)
	}
	cb := c.Billy()
	wf, err := cb.OpenFile("a/b/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	wf.(*File).WriteAt([]byte("XX"), 5000)
	if err := wf.Truncate(6000); err != nil {
		t.Fatal(err)
	}
	if err := wf.Truncate(9000); err != nil {
		t.Fatal(err)
	}
	rf, _ := cb.Open("a/b/f")
	got, _ := io.ReadAll(rf)
	want := append([]byte(nil), data[:6000]...)
	copy(want[5000:], "XX")
	want = append(want, make([]byte, 3000)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("child content differs (len %d vs %d)", len(got), len(want))
	}
	pf, _ := b.Open("a/b/f")
	got, _ = io.ReadAll(pf)
	if !bytes.Equal(got, data) {
		t.Fatal("parent changed by child write")
	}
	if err := cb.Remove("a/b/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Stat("a/b/f"); !os.IsNotExist(err) {
		t.Fatalf("removed file: %v", err)
	}
	if _, err := b.Stat("a/b/f"); err != nil {
		t.Fatal(err)
	}
	infos, err := cb.ReadDir("a/b")
	if err != nil || len(infos) != 0 {
		t.Fatalf("readdir after remove: %v %v", infos, err)
	}
	if err := cb.Rename("a/b", "a/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat("a/b"); err != nil {
		t.Fatal(err)
	}
	p, err := c.PathOf(mustStat(t, cb, "a/c"))
	if err != nil || p != "a/c" {
		t.Fatalf("path %q %v", p, err)
	}
}

func mustStat(t *testing.T, b *Billy, p string) InodeID {
	fi, err := b.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*Attr).Ino
}

package importdir

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

func newFS(t *testing.T) *cowfs.View {
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
	return f
}

// makeTree builds a source tree with every kind of entry importdir handles.
func makeTree(t *testing.T, root string, seed int64) {
	t.Helper()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		d := filepath.Join(root, fmt.Sprintf("dir%d", i), "sub")
		must(os.MkdirAll(d, 0o755))
		for j := 0; j < 20; j++ {
			data := make([]byte, rng.Intn(5000))
			rng.Read(data)
			p := filepath.Join(d, fmt.Sprintf("f%02d.bin", j))
			must(os.WriteFile(p, data, 0o644))
			must(os.Chmod(p, os.FileMode([]uint32{0o644, 0o600, 0o755, 0o400}[j%4])))
		}
	}
	big := make([]byte, 3<<20+17) // spans several import chunks
	rng.Read(big)
	must(os.WriteFile(filepath.Join(root, "big"), big, 0o640))
	must(os.WriteFile(filepath.Join(root, "empty"), nil, 0o600))
	must(os.WriteFile(filepath.Join(root, "suid"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(root, "suid"), 0o4755|os.ModeSetuid))
	must(syscall.Chmod(filepath.Join(root, "suid"), 0o4755))
	must(os.Mkdir(filepath.Join(root, "sticky"), 0o755))
	must(syscall.Chmod(filepath.Join(root, "sticky"), 0o1777))
	must(os.Symlink("dir0/sub/f00.bin", filepath.Join(root, "link")))
	must(os.Symlink("/nonexistent/dangling", filepath.Join(root, "dangling")))
	must(os.Link(filepath.Join(root, "dir1/sub/f01.bin"), filepath.Join(root, "hard1")))
	must(os.Link(filepath.Join(root, "dir1/sub/f01.bin"), filepath.Join(root, "dir2/hard2")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o620))
	if os.Geteuid() == 0 {
		must(os.Lchown(filepath.Join(root, "fifo"), 1234, 5678))
		must(os.Lchown(filepath.Join(root, "link"), 4321, 8765))
		must(os.Lchown(filepath.Join(root, "dir3"), 99, 98))
	}
	must(os.Mkdir(filepath.Join(root, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(root, "ro", "x"), []byte("x"), 0o444))
	must(os.Chmod(filepath.Join(root, "ro"), 0o555))
	// Distinct times, set last (children first so directory times stick).
	var paths []string
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { paths = append(paths, p); return nil })
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	base := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, p := range paths {
		at := base.Add(time.Duration(i)*time.Hour + 123456789)
		mt := base.Add(time.Duration(i)*time.Minute + 987654321)
		fi, _ := os.Lstat(p)
		if fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		must(os.Chtimes(p, at, mt))
	}
}

type entry struct {
	Type   string
	Mode   uint32
	Size   int64
	Hash   [32]byte
	Target string
	Mtime  time.Time
	Nlink  uint32
	UID    uint32
	GID    uint32
	Link   string // first path with the same inode, for hard links
}

// sourceEntries walks the local tree.
func sourceEntries(t *testing.T, root string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	seen := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := entry{Mode: uint32(st.Mode) & cowfs.ModePerm, Nlink: uint32(st.Nlink), UID: st.Uid, GID: st.Gid}
		switch m := fi.Mode(); {
		case m.IsDir():
			e.Type = "dir"
			e.Nlink = 0 // directory link counts are not compared
		case m.IsRegular():
			e.Type = "file"
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Size, e.Hash = int64(len(b)), sha256.Sum256(b)
		case m&os.ModeSymlink != 0:
			e.Type = "symlink"
			e.Target, _ = os.Readlink(p)
			e.Mode = 0
		case m&os.ModeNamedPipe != 0:
			e.Type = "fifo"
		}
		if e.Type != "symlink" {
			e.Mtime = fi.ModTime()
		}
		if e.Type != "dir" && st.Nlink > 1 {
			if first, ok := seen[st.Ino]; !ok || rel < first {
				seen[st.Ino] = rel
			}
			e.Link = fmt.Sprint(st.Ino)
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, e := range out {
		if e.Link != "" {
			var ino uint64
			fmt.Sscan(e.Link, &ino)
			e.Link = seen[ino]
			out[k] = e
		}
	}
	return out
}

// viewEntries walks the imported tree through the inode API.
func viewEntries(t *testing.T, f *cowfs.View) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	seen := map[cowfs.InodeID]string{}
	var walk func(ino cowfs.InodeID, rel string)
	walk = func(ino cowfs.InodeID, rel string) {
		a, err := f.GetAttr(ino)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		e := entry{Type: a.Type.String(), Mode: a.Mode, Nlink: a.Nlink, Mtime: a.Mtime, UID: a.UID, GID: a.GID}
		switch a.Type {
		case cowfs.TypeDir:
			e.Nlink = 0
		case cowfs.TypeRegular:
			var buf bytes.Buffer
			p := make([]byte, 1<<16)
			var off int64
			for {
				n, eof, err := f.ReadAt(ino, p, off)
				if err != nil {
					t.Fatalf("%s: read: %v", rel, err)
				}
				buf.Write(p[:n])
				off += int64(n)
				if eof || n == 0 {
					break
				}
			}
			e.Size, e.Hash = int64(buf.Len()), sha256.Sum256(buf.Bytes())
			if uint64(e.Size) != a.Size {
				t.Fatalf("%s: read %d bytes, size %d", rel, e.Size, a.Size)
			}
		case cowfs.TypeSymlink:
			e.Target, err = f.Readlink(ino)
			if err != nil {
				t.Fatal(err)
			}
			e.Mode, e.Mtime = 0, time.Time{}
		}
		if a.Type != cowfs.TypeDir && a.Nlink > 1 {
			if first, ok := seen[ino]; !ok || rel < first {
				seen[ino] = rel
			}
			e.Link = fmt.Sprint(uint64(ino))
		}
		out[rel] = e
		if a.Type != cowfs.TypeDir {
			return
		}
		var cookie uint64
		for {
			ents, eof, err := f.ReadDir(ino, cookie, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, de := range ents {
				walk(de.Ino, filepath.Join(rel, de.Name))
				cookie = de.Cookie
			}
			if eof {
				break
			}
		}
	}
	walk(cowfs.RootIno, ".")
	for k, e := range out {
		if e.Link != "" {
			var ino uint64
			fmt.Sscan(e.Link, &ino)
			e.Link = seen[cowfs.InodeID(ino)]
			out[k] = e
		}
	}
	return out
}

func TestImportReproducesTree(t *testing.T) {
	src := t.TempDir()
	makeTree(t, src, time.Now().UnixNano())
	f := newFS(t)
	var calls int
	var last Progress
	p, err := Import(context.Background(), f, cowfs.RootIno, src, Options{
		Progress: func(p Progress) { calls++; last = p },
	})
	if err != nil {
		t.Fatal(err)
	}
	want, got := sourceEntries(t, src), viewEntries(t, f)
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, g := want[k], got[k]
		if !w.Mtime.Equal(g.Mtime) {
			t.Errorf("%s: mtime %v, want %v", k, g.Mtime, w.Mtime)
		}
		w.Mtime, g.Mtime = time.Time{}, time.Time{}
		if w != g {
			t.Errorf("%s:\n got %+v\nwant %+v", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("extra entry %s", k)
		}
	}
	if p.HardLinks != 2 || p.Symlinks != 2 || p.Special != 1 || p.Files != 104 {
		t.Errorf("progress %+v", p)
	}
	if int64(calls) != p.Entries() || last.Entries() != p.Entries() {
		t.Errorf("progress called %d times for %d entries (last %+v)", calls, p.Entries(), last)
	}
}

func TestImportErrors(t *testing.T) {
	f := newFS(t)
	ctx := context.Background()
	if _, err := Import(ctx, f, cowfs.RootIno, filepath.Join(t.TempDir(), "missing"), Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing source: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := Import(ctx, f, cowfs.RootIno, file, Options{}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file source: %v", err)
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o644)
	if _, err := Import(ctx, f, cowfs.RootIno, src, Options{}); err != nil {
		t.Fatal(err)
	}
	// A second import collides on "a".
	if _, err := Import(ctx, f, cowfs.RootIno, src, Options{}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("collision: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Import(cctx, newFS(t), cowfs.RootIno, src, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestImportStoresChunks: an imported file of several blocks is stored as
// content-defined chunks, so rechunking finds nothing to do, and the same
// file with 10 bytes prepended, written in fixed blocks and rechunked,
// shares all its chunks but the first with it.
func TestImportStoresChunks(t *testing.T) {
	ctx := context.Background()
	s, err := cowfs.Open(ctx, kvtest.NewStore(t), cowfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.NewTree(ctx, 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := s.View([]cowfs.LayerID{l})
	defer f.Close()
	src := t.TempDir()
	data := make([]byte, 2<<20+300)
	rand.New(rand.NewSource(5)).Read(data)
	if err := os.WriteFile(filepath.Join(src, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(ctx, f, cowfs.RootIno, src, Options{}); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Rechunk(ctx, l, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if rs != (cowfs.RechunkStats{}) {
		t.Fatalf("rechunking after the import did %+v, want nothing", rs)
	}
	g, err := f.Create(cowfs.RootIno, "g", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	shifted := append([]byte("0123456789"), data...)
	if _, err := f.WriteAt(g.Ino, shifted, 0); err != nil {
		t.Fatal(err)
	}
	if rs, err = s.Rechunk(ctx, l, 1<<40); err != nil {
		t.Fatal(err)
	}
	// All the copy's blocks (its short last block, stored inline, ends
	// the run, so the last chunk is the import's); the one chunk that
	// differs is the first.
	blocks := (len(shifted) + 32<<10 - 1) / (32 << 10)
	if rs.Blocks != blocks || rs.Chunks != 1 {
		t.Fatalf("rechunking the shifted copy did %+v, want its %d blocks in chunks all but 1 of which the import stored", rs, blocks)
	}
	fa, err := f.Lookup(cowfs.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data)+1)
	n, _, err := f.ReadAt(fa.Ino, got, 0)
	if err != nil || !bytes.Equal(got[:n], data) {
		t.Fatalf("imported file reads %d other bytes (%v)", n, err)
	}
}

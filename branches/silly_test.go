package branches_test

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

const (
	sillyMac   = ".nfs.0000abcd.01f4"           // macOS: .nfs.%08x.%04x
	sillyLinux = ".nfs00000000000f424000000001" // Linux: .nfs%016llx%08x
)

// sillyRename does what an NFS client does when a process removes a file
// it still has open: rename it to a hidden name in the same directory.
func sillyRename(t *testing.T, m *branches.Manager, b, dir, name, silly string) cowfs.InodeID {
	t.Helper()
	fs, _, err := m.View(b)
	if err != nil {
		t.Fatal(err)
	}
	d := cowfs.RootIno
	if dir != "" {
		a, err := fs.Lookup(cowfs.RootIno, dir)
		if err != nil {
			t.Fatal(err)
		}
		d = a.Ino
	}
	a, err := fs.Lookup(d, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Rename(d, name, d, silly); err != nil {
		t.Fatal(err)
	}
	return a.Ino
}

func assertNoSilly(t *testing.T, m *branches.Manager, b string, gone ...cowfs.InodeID) {
	t.Helper()
	fs, _, err := m.View(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", "d"} {
		ino := cowfs.RootIno
		if dir != "" {
			a, err := fs.Lookup(cowfs.RootIno, dir)
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			ino = a.Ino
		}
		ents, _, err := fs.ReadDir(ino, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if cowfs.IsSillyName(e.Name) {
				t.Errorf("%s: %s/%s was published by the commit", b, dir, e.Name)
			}
		}
		for _, s := range []string{sillyMac, sillyLinux} {
			if _, err := fs.Lookup(ino, s); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("%s: lookup %s/%s = %v, want ENOENT", b, dir, s, err)
			}
		}
	}
	for _, ino := range gone {
		if _, err := fs.GetAttr(ino); !errors.Is(err, syscall.ESTALE) {
			t.Errorf("%s: silly-renamed inode %d still exists: %v", b, ino, err)
		}
	}
}

func TestCommitDropsSillyRenames(t *testing.T) {
	for _, fast := range []bool{true, false} {
		name := "merge"
		if fast {
			name = "fast"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			write(t, m, "main", "d/inherited", "from main")
			write(t, m, "main", "keep", "k")
			must(m.Fork(ctx, "main", "c"))(t)
			write(t, m, "c", "d/new", "from c")
			write(t, m, "c", "d/open-deleted", "scratch")
			gone := []cowfs.InodeID{
				sillyRename(t, m, "c", "d", "inherited", sillyMac),
				sillyRename(t, m, "c", "d", "open-deleted", sillyLinux),
			}
			// A silly rename the client already cleaned up, and a
			// silly name renamed back: both leave stale index records.
			write(t, m, "c", "closed", "x")
			sillyRename(t, m, "c", "", "closed", sillyMac)
			fs, _, _ := m.View("c")
			if err := fs.Unlink(cowfs.RootIno, sillyMac); err != nil {
				t.Fatal(err)
			}
			write(t, m, "c", "back", "y")
			sillyRename(t, m, "c", "", "back", sillyLinux)
			if err := fs.Rename(cowfs.RootIno, sillyLinux, cowfs.RootIno, "back"); err != nil {
				t.Fatal(err)
			}
			if d := must(m.Diff(ctx, "c"))(t); len(d.Changes) != 3 {
				t.Errorf("diff = %+v; want d/inherited deleted, d/new and back added", d.Changes)
			} else {
				for _, ch := range d.Changes {
					if cowfs.IsSillyName(ch.Path) {
						t.Errorf("diff lists %s", ch.Path)
					}
				}
			}
			if !fast {
				write(t, m, "main", "parent-change", "p")
			}
			res := must(m.Commit(ctx, "c"))(t)
			if res.FastPath != fast {
				t.Fatalf("fast path = %v, want %v", res.FastPath, fast)
			}
			assertNoSilly(t, m, "main", gone...)
			for p, want := range map[string]string{"d/new": "from c", "d/inherited": "<missing>", "back": "y", "closed": "<missing>", "keep": "k"} {
				if got := read(t, m, "main", p); got != want {
					t.Errorf("main %s = %q, want %q", p, got, want)
				}
			}
		})
	}
}

// The silly index survives a fork of the branch (its layer freezes) and a
// nested commit: the outer fast-path commit still finds the entry.
func TestSillyIndexAcrossFrozenLayers(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	write(t, m, "main", "keep", "k")
	must(m.Fork(ctx, "main", "c"))(t)
	write(t, m, "c", "f", "open")
	ino := sillyRename(t, m, "c", "", "f", sillyMac)
	must(m.Checkpoint(ctx, "c", "cp"))(t) // freezes the layer holding the index key
	must(m.Fork(ctx, "c", "g"))(t)
	write(t, m, "g", "more", "m")
	if res := must(m.Commit(ctx, "g"))(t); !res.FastPath {
		t.Fatal("want a fast-path commit of g")
	}
	if res := must(m.Commit(ctx, "c"))(t); !res.FastPath {
		t.Fatal("want a fast-path commit of c")
	}
	assertNoSilly(t, m, "main", ino)
	if got := read(t, m, "main", "more"); got != "m" {
		t.Errorf("main more = %q", got)
	}
}

package nfsserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	nfs "github.com/willscott/go-nfs"
)

func TestBranchesOverNFS(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, "")
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	k := c.as(authRoot)

	mainRoot := c.mnt("/main")
	fh, _, st := k.create(mainRoot, "shared.txt", 1, sa{})
	must(t, st, "create")
	_, _, _, st = k.write(fh, 0, []byte("from main"), fileSync)
	must(t, st, "write")

	b1, err := m.Fork(ctx, "main", "b1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Fork(ctx, "main", "b2"); err != nil {
		t.Fatal(err)
	}
	b1Root := c.mnt("/b1")
	b2Root := c.mnt("/b2")
	b1File, b1Attr, st := k.lookup(b1Root, "shared.txt")
	must(t, st, "lookup in b1")
	mainAttr, _ := k.getattr(fh)

	t.Run("fsid differs per branch", func(t *testing.T) {
		if mainAttr.fsid == b1Attr.fsid {
			t.Fatalf("main and b1 share fsid %d", b1Attr.fsid)
		}
		if b1Attr.fsid != uint64(b1.ID) || b1Attr.fileid != mainAttr.fileid {
			t.Fatalf("b1: fsid %d fileid %d", b1Attr.fsid, b1Attr.fileid)
		}
	})
	t.Run("forged branch id", func(t *testing.T) {
		// b1's handle edited to point into main: the MAC no longer
		// matches.
		forged := append([]byte(nil), b1File...)
		binary.BigEndian.PutUint64(forged[4:], uint64(mainAttr.fsid))
		if _, st := k.getattr(forged); st != nfs.NFSStatusBadHandle {
			t.Fatalf("forged handle: %d", st)
		}
	})
	t.Run("copy on write isolation", func(t *testing.T) {
		_, _, _, st := k.write(b1File, 0, []byte("FROM B1  "), fileSync)
		must(t, st, "write b1")
		data, _, _ := k.read(fh, 0, 100)
		if string(data) != "from main" {
			t.Fatalf("main sees %q", data)
		}
		b2File, _, _ := k.lookup(b2Root, "shared.txt")
		data, _, _ = k.read(b2File, 0, 100)
		if string(data) != "from main" {
			t.Fatalf("b2 sees %q", data)
		}
		if _, _, st := k.lookup(b1Root, ".."); st != 0 {
			t.Fatalf("lookup .. of branch root: %d", st)
		}
	})
	t.Run("cross-branch rename and link", func(t *testing.T) {
		if st := k.rename(b1Root, "shared.txt", mainRoot, "x"); st != nfs.NFSStatusXDev {
			t.Fatalf("rename across branches: %d", st)
		}
		if _, st := k.link(b1File, mainRoot, "x"); st != nfs.NFSStatusXDev {
			t.Fatalf("link across branches: %d", st)
		}
	})
	t.Run("commit invalidates sibling", func(t *testing.T) {
		if _, err := m.Commit(ctx, "b1"); err != nil {
			t.Fatal(err)
		}
		data, _, st := k.read(fh, 0, 100)
		must(t, st, "read main")
		if string(data) != "FROM B1  " {
			t.Fatalf("main after commit: %q", data)
		}
		for name, h := range map[string][]byte{"b1 root": b1Root, "b1 file": b1File, "b2 root": b2Root} {
			if _, st := k.getattr(h); st != nfs.NFSStatusStale {
				t.Errorf("%s after commit: %d, want STALE", name, st)
			}
		}
		if st := c.mount(1, args("/b2")).u32(); st != 2 {
			t.Errorf("MNT of invalidated branch: %d", st)
		}
	})
	t.Run("abort makes handles stale", func(t *testing.T) {
		if _, err := m.Fork(ctx, "main", "b3"); err != nil {
			t.Fatal(err)
		}
		r3 := c.mnt("/b3")
		f3, _, _ := k.lookup(r3, "shared.txt")
		if _, err := m.Abort(ctx, "b3"); err != nil {
			t.Fatal(err)
		}
		if _, st := k.getattr(f3); st != nfs.NFSStatusStale {
			t.Errorf("after abort: %d", st)
		}
		if _, _, _, st := k.write(f3, 0, []byte("x"), unstable); st != nfs.NFSStatusStale {
			t.Errorf("write after abort: %d", st)
		}
	})
}

// The root export "/" shows every live branch as a directory, and no two
// branches' files share (fsid, fileid) there.
func TestRootExport(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, "")
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	mainRoot := c.mnt("/main")
	_, _, st := k.create(mainRoot, "f", 1, sa{})
	must(t, st, "create")
	if _, err := m.Fork(ctx, "main", "b1"); err != nil {
		t.Fatal(err)
	}

	root := c.mnt("/")
	ents := k.readdirAll(root, 4096, true)
	var names []string
	for _, e := range ents {
		names = append(names, e.name)
		if e.name != "." && e.name != ".." && (e.attr == nil || e.fh == nil || e.attr.typ != 2) {
			t.Errorf("entry %s without attrs or handle", e.name)
		}
	}
	if fmt.Sprint(names) != "[. .. main b1]" {
		t.Fatalf("root lists %v", names)
	}
	viaMain, _, st := k.lookup(root, "main")
	must(t, st, "lookup main")
	viaB1, _, st := k.lookup(root, "b1")
	must(t, st, "lookup b1")
	if !bytes.Equal(viaMain, ents[2].fh) {
		t.Error("READDIRPLUS and LOOKUP handles differ")
	}
	_, fMain, _ := k.lookup(viaMain, "f")
	_, fB1, _ := k.lookup(viaB1, "f")
	if fMain.fsid != fB1.fsid || fMain.fileid == fB1.fileid {
		t.Fatalf("same file in two branches: (%d,%d) and (%d,%d)", fMain.fsid, fMain.fileid, fB1.fsid, fB1.fileid)
	}
	// ".." of a branch root leads back to the synthetic root.
	up, upAttr, st := k.lookup(viaB1, "..")
	must(t, st, "lookup ..")
	if !bytes.Equal(up, root) || upAttr.fileid != 1 {
		t.Fatalf(".. of branch root: fileid %d", upAttr.fileid)
	}
	if _, _, st := k.lookup(root, "nope"); st != nfs.NFSStatusNoEnt {
		t.Fatalf("lookup of a missing branch: %d", st)
	}
	// Files made through "/" land in the branch.
	_, _, st = k.create(viaB1, "new", 1, sa{})
	must(t, st, "create via /")
	b1Root := c.mnt("/b1")
	if _, _, st := k.lookup(b1Root, "new"); st != 0 {
		t.Fatalf("file created via / not in b1: %d", st)
	}
	// Aborting a branch removes it from the listing and makes its handles
	// under "/" stale.
	if _, err := m.Abort(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	if _, st := k.getattr(viaB1); st != nfs.NFSStatusStale {
		t.Fatalf("aborted branch via /: %d", st)
	}
	names = nil
	for _, e := range k.readdirAll(root, 4096, false) {
		names = append(names, e.name)
	}
	if fmt.Sprint(names) != "[. .. main]" {
		t.Fatalf("root lists %v after abort", names)
	}
}

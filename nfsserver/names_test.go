package nfsserver

import (
	"context"
	"testing"

	nfs "github.com/willscott/go-nfs"
)

// Names in NFC (shells) and NFD (Cocoa apps) are one name over NFS too,
// and READDIR returns the spelling that was created.
func TestNFCAndNFDOverNFS(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authSys(501, 20, 20))
	must(t, c.as(authRoot).setattr(root, sa{mode: u32p(0o777)}), "chmod root")
	const nfc, nfd = "caf\u00e9", "cafe\u0301"
	_, a, st := k.createExcl(root, nfd, [8]byte{1})
	must(t, st, "create NFD")
	_, b, st := k.lookup(root, nfc)
	must(t, st, "lookup NFC")
	if b.fileid != a.fileid {
		t.Fatalf("lookup of the NFC form found fileid %d, created %d", b.fileid, a.fileid)
	}
	if _, _, st := k.createExcl(root, nfc, [8]byte{2}); st != nfs.NFSStatusExist {
		t.Errorf("exclusive create of the other form: %d, want EXIST", st)
	}
	ents := k.readdirAll(root, 4096, true)
	var names []string
	for _, e := range ents {
		if e.name != "." && e.name != ".." {
			names = append(names, e.name)
		}
	}
	if len(names) != 1 || names[0] != nfd {
		t.Errorf("READDIRPLUS names = %q, want [%q]", names, nfd)
	}
	must(t, k.rename(root, nfc, root, "plain"), "rename from the other form")
	if _, b, st := k.lookup(root, "plain"); st != 0 || b.fileid != a.fileid {
		t.Errorf("after rename: lookup plain = %d, fileid %d", st, b.fileid)
	}
}

// A merge commit into main changes the mtime of the directories whose
// listing it changes, as main's clients see them over NFS.
func TestMergeDirMtimeOverNFS(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, "")
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	dir, _, st := k.mkdir(root, "d", 0o755)
	must(t, st, "mkdir d")
	if _, err := m.Fork(ctx, "main", "c"); err != nil {
		t.Fatal(err)
	}
	croot := c.mnt("/c")
	cdir, _, st := k.lookup(croot, "d")
	must(t, st, "lookup d in c")
	_, _, st = k.create(cdir, "from-child", 1, sa{mode: u32p(0o644)})
	must(t, st, "create in c")
	_, _, st = k.create(dir, "from-main", 1, sa{mode: u32p(0o644)})
	must(t, st, "create in main")
	before, st := k.getattr(dir)
	must(t, st, "getattr d")
	if _, err := m.Commit(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	after, st := k.getattr(dir)
	must(t, st, "getattr d after commit")
	if after.mtime == before.mtime {
		t.Errorf("mtime of d stayed %v after a merge added from-child", after.mtime)
	}
	if _, _, st := k.lookup(dir, "from-child"); st != 0 {
		t.Errorf("lookup of the merged file: %d", st)
	}
}

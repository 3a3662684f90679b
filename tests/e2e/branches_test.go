package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nfs "github.com/willscott/go-nfs-client/nfs"
)

// Item 1: a file written into a fork is invisible in the parent and in a
// sibling; after commit the parent shows it and the sibling's export
// answers STALE, for an existing handle and for a new mount.
func TestForkIsolationCommitInvalidatesSibling(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)

	main, _ := c.mount(t, "/main")
	writeFile(t, main, "/base.txt", []byte("base"))

	if out := mustCLI(t, store, "fork", "main", "b1"); out != "/b1\n" {
		t.Fatalf("fork printed %q, want the export path /b1", out)
	}
	mustCLI(t, store, "fork", "main", "b2")
	b1, _ := c.mount(t, "/b1")
	b2, b2root := c.mount(t, "/b2")
	sibFH := writeFile(t, b2, "/sibling.txt", []byte("sibling"))
	if got := mustRead(t, b2, "/base.txt"); string(got) != "base" {
		t.Fatalf("b2 sees base.txt = %q", got)
	}

	// The same file seen through the export "/" that shows every branch.
	all, _ := c.mount(t, "/")
	_, sibViaRoot, err := all.Lookup("/b2/sibling.txt")
	if err != nil {
		t.Fatalf("b2/sibling.txt through /: %v", err)
	}

	want := []byte("written in b1\n")
	writeFile(t, b1, "/new.txt", want)
	for name, tg := range map[string]*nfs.Target{"main": main, "b2": b2} {
		_, err := readFile(tg, "/new.txt")
		wantStatus(t, "new.txt in "+name+" before commit", err, nfs.NFS3ErrNoEnt)
	}
	// The parent keeps writing after the fork; the child does not see it.
	writeFile(t, main, "/later.txt", []byte("later"))
	_, err = readFile(b1, "/later.txt")
	wantStatus(t, "later.txt in b1", err, nfs.NFS3ErrNoEnt)

	t.Run("libnfs", func(t *testing.T) {
		needLibnfs(t)
		src := filepath.Join(t.TempDir(), "viacp.txt")
		os.WriteFile(src, []byte("via nfs-cp\n"), 0o644)
		mustLibnfs(t, "nfs-cp", src, nfsURL(srv.port, "/b1/viacp.txt"))
		if got := mustLibnfs(t, "nfs-cat", nfsURL(srv.port, "/b1/viacp.txt")); got != "via nfs-cp\n" {
			t.Fatalf("nfs-cat b1/viacp.txt = %q", got)
		}
		for _, b := range []string{"main", "b2"} {
			if _, err := libnfs(t, "nfs-cat", nfsURL(srv.port, "/"+b+"/viacp.txt")); err == nil {
				t.Fatalf("nfs-cat %s/viacp.txt succeeded before the commit", b)
			}
		}
	})

	out := mustCLI(t, store, "commit", "b1", "--force")
	if !strings.Contains(out, "committed b1 into main") || !strings.Contains(out, "invalidated: b2") {
		t.Fatalf("commit output %q", out)
	}
	if got := mustRead(t, main, "/new.txt"); !bytes.Equal(got, want) {
		t.Fatalf("main/new.txt after commit = %q", got)
	}
	if got := mustRead(t, main, "/later.txt"); string(got) != "later" {
		t.Fatalf("main lost later.txt: %q", got)
	}
	if haveLibnfs {
		if got := mustLibnfs(t, "nfs-cat", nfsURL(srv.port, "/main/viacp.txt")); got != "via nfs-cp\n" {
			t.Fatalf("nfs-cat main/viacp.txt after commit = %q", got)
		}
		if got := mustLibnfs(t, "nfs-cat", nfsURL(srv.port, "/main/new.txt")); got != string(want) {
			t.Fatalf("nfs-cat main/new.txt after commit = %q", got)
		}
	}

	// The sibling: existing handles are STALE ...
	_, err = b2.GetAttr(sibFH)
	wantStatus(t, "GETATTR of an existing b2 file handle", err, nfs.NFS3ErrStale)
	_, err = b2.GetAttr(b2root)
	wantStatus(t, "GETATTR of b2's root handle", err, nfs.NFS3ErrStale)
	_, err = c.readFH(sibFH)
	wantStatus(t, "READ of an existing b2 file handle", err, nfs.NFS3ErrStale)
	wantStatus(t, "WRITE to an existing b2 file handle", c.writeFH(sibFH, []byte("x")), nfs.NFS3ErrStale)
	_, err = all.GetAttr(sibViaRoot)
	wantStatus(t, "GETATTR of a b2 handle met through /", err, nfs.NFS3ErrStale)
	_, _, err = all.Lookup("/b2")
	wantStatus(t, "LOOKUP of b2 in / after the commit", err, nfs.NFS3ErrNoEnt)
	if got := mustRead(t, all, "/main/new.txt"); !bytes.Equal(got, want) {
		t.Fatalf("/main/new.txt through / = %q", got)
	}
	// ... and a new mount is refused.
	if _, err := c.mnt("/b2"); err != mntError(nfs.MNT3ErrNoEnt) {
		t.Fatalf("new MNT of invalidated b2: %v, want MNT3ERR_NOENT", err)
	}
	if haveLibnfs {
		if _, err := libnfs(t, "nfs-ls", nfsURL(srv.port, "/b2")); err == nil {
			t.Fatal("nfs-ls of invalidated b2 succeeded")
		}
	}
	// The CLI says which commit invalidated it.
	code, _, stderr := cli(t, store, "diff", "b2")
	if code != 6 || !strings.Contains(stderr, "b1") || !strings.Contains(stderr, "invalidated") {
		t.Fatalf("diff b2: exit %d, %q", code, stderr)
	}
	if in := listBranches(t, store)["b2"]; in.State != "invalidated" || !strings.Contains(in.InvalidatedBy, "b1") {
		t.Fatalf("list shows b2 as %+v", in)
	}
}

// Item 2: abort makes the branch's handles STALE at once.
func TestAbortMakesHandlesStale(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	mustCLI(t, store, "fork", "main", "a1")
	a1, root := c.mount(t, "/a1")
	if _, err := a1.Mkdir("/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	fh := writeFile(t, a1, "/dir/f.txt", []byte("doomed"))
	_, dirFH, err := a1.Lookup("/dir")
	if err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, store, "abort", "a1", "--force")
	if out != "aborted a1\n" {
		t.Fatalf("abort printed %q", out)
	}
	for what, h := range map[string][]byte{"file": fh, "dir": dirFH, "root": root} {
		_, err := a1.GetAttr(h)
		wantStatus(t, "GETATTR of aborted "+what, err, nfs.NFS3ErrStale)
	}
	_, err = c.readFH(fh)
	wantStatus(t, "READ after abort", err, nfs.NFS3ErrStale)
	wantStatus(t, "WRITE after abort", c.writeFH(fh, []byte("x")), nfs.NFS3ErrStale)
	if _, err := c.mnt("/a1"); err != mntError(nfs.MNT3ErrNoEnt) {
		t.Fatalf("MNT of aborted a1: %v", err)
	}
	// main never saw any of it.
	mainT, _ := c.mount(t, "/main")
	_, err = readFile(mainT, "/dir/f.txt")
	wantStatus(t, "aborted file in main", err, nfs.NFS3ErrNoEnt)
}

// Item 3: nested branches, three deep; commits go up one level at a time.
func TestNestedCommits(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	mustCLI(t, store, "fork", "main", "c1")
	mustCLI(t, store, "fork", "c1", "c2")
	mustCLI(t, store, "fork", "c2", "c3")
	levels := []string{"c1", "c2", "c3"}
	for _, b := range levels {
		tg, _ := c.mount(t, "/"+b)
		writeFile(t, tg, "/"+b+".txt", []byte("from "+b))
	}
	if d := listBranches(t, store)["c3"].Depth; d != 3 {
		t.Fatalf("c3 depth %d, want 3", d)
	}
	// c3 does not see its ancestors' later writes, c1 does not see c3's.
	c1, _ := c.mount(t, "/c1")
	_, err := readFile(c1, "/c3.txt")
	wantStatus(t, "c3.txt in c1", err, nfs.NFS3ErrNoEnt)

	// A branch with live children cannot be committed.
	code, _, stderr := cli(t, store, "commit", "c2", "--force")
	if code != 8 || !strings.Contains(stderr, "c3") {
		t.Fatalf("commit of c2 with live child c3: exit %d %q", code, stderr)
	}
	mustCLI(t, store, "commit", "c3", "--force")
	c2, _ := c.mount(t, "/c2")
	if got := mustRead(t, c2, "/c3.txt"); string(got) != "from c3" {
		t.Fatalf("c2/c3.txt = %q", got)
	}
	mustCLI(t, store, "commit", "c2", "--force")
	mustCLI(t, store, "commit", "c1", "--force")
	mainT, _ := c.mount(t, "/main")
	for _, b := range levels {
		if got := mustRead(t, mainT, "/"+b+".txt"); string(got) != "from "+b {
			t.Fatalf("main/%s.txt = %q", b, got)
		}
	}
	if haveLibnfs {
		if got := mustLibnfs(t, "nfs-cat", nfsURL(srv.port, "/main/c3.txt")); got != "from c3" {
			t.Fatalf("nfs-cat main/c3.txt = %q", got)
		}
	}
	d := mustCLI(t, store, "list")
	if strings.Contains(d, "c1") {
		t.Fatalf("committed branches still listed:\n%s", d)
	}
}

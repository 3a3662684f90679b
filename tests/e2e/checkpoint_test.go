package e2e

import (
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"
)

func mtimeOf(t *testing.T, tg *nfs.Target, fh []byte) time.Time {
	t.Helper()
	a, err := tg.GetAttr(fh)
	if err != nil {
		t.Fatalf("GETATTR: %v", err)
	}
	return time.Unix(int64(a.Mtime.Seconds), int64(a.Mtime.Nseconds))
}

// Checkpoint, restore and fork-from-checkpoint as a mounted client sees
// them, and the server's own changes (a restore, a commit landing in the
// parent) move the directory mtime, which macOS's client validates its
// caches on.
func TestCheckpointRestoreAndServerMtimes(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	mustCLI(t, store, "fork", "main", "b")
	b, bRoot := c.mount(t, "/b")
	fFH := writeFile(t, b, "/f.txt", []byte("v1"))
	mustCLI(t, store, "checkpoint", "b", "cp")

	if err := c.writeFH(fFH, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, b, "/g.txt", []byte("after the checkpoint"))
	before := mtimeOf(t, b, bRoot)
	time.Sleep(10 * time.Millisecond) // so a changed mtime can differ

	mustCLI(t, store, "restore", "b", "cp")
	if got, err := c.readFH(fFH); err != nil || string(got) != "v1" {
		t.Fatalf("f.txt through its handle after restore = %q, %v; want v1", got, err)
	}
	_, err := readFile(b, "/g.txt")
	wantStatus(t, "g.txt after restore", err, nfs.NFS3ErrNoEnt)
	// The directory changed (g.txt is gone), so its mtime must differ from
	// what clients cached. (It goes back to the checkpoint's.)
	if after := mtimeOf(t, b, bRoot); after.Equal(before) {
		t.Errorf("restore left the root mtime at %v: clients keep stale caches", after)
	}

	out := mustCLI(t, store, "fork", "b", "c", "--checkpoint", "cp")
	if out != "/c\n" {
		t.Fatalf("fork --checkpoint printed %q", out)
	}
	cT, _ := c.mount(t, "/c")
	if got := mustRead(t, cT, "/f.txt"); string(got) != "v1" {
		t.Fatalf("c/f.txt = %q", got)
	}
	mustCLI(t, store, "abort", "c", "--force")

	// A commit landing in main moves main's root mtime.
	mainT, mainRoot := c.mount(t, "/main")
	before = mtimeOf(t, mainT, mainRoot)
	time.Sleep(10 * time.Millisecond)
	mustCLI(t, store, "commit", "b", "--force")
	if after := mtimeOf(t, mainT, mainRoot); after.Equal(before) {
		t.Errorf("commit into main left its root mtime at %v (was %v)", after, before)
	}
	if got := mustRead(t, mainT, "/f.txt"); string(got) != "v1" {
		t.Fatalf("main/f.txt after commit = %q", got)
	}
}

package nfsserver

import (
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
	nfs "github.com/willscott/go-nfs"
)

// createMany makes n empty files in dir, pipelining the CREATEs down one
// connection.
func createMany(t *testing.T, c *rawClient, dir []byte, prefix string, n int) {
	t.Helper()
	const window = 32
	chans := make([]chan []byte, 0, window)
	flush := func() {
		for _, ch := range chans {
			r := parseReply(t, c.wait(ch))
			if r.stat != acceptSuccess || r.body.u32() != 0 {
				t.Fatal("CREATE failed")
			}
		}
		chans = chans[:0]
	}
	for i := range n {
		xid := c.nextXID()
		chans = append(chans, c.expect(xid))
		a := append(args(dir, fmt.Sprintf("%s%05d", prefix, i), 1), sa{mode: u32p(0o644)}.enc()...)
		c.writeRecord(callMsg(xid, 2, progNFS, 3, 8, authRoot, a))
		if len(chans) == window {
			flush()
		}
	}
	flush()
}

func TestReaddirPagesRespectCount(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	dir, _, _ := k.mkdir(root, "d", 0o755)
	createMany(t, c, dir, "file-with-a-longish-name-", 300)
	for _, plus := range []bool{false, true} {
		for _, count := range []uint32{512, 1024, 8192} {
			t.Run(fmt.Sprintf("plus=%v/count=%d", plus, count), func(t *testing.T) {
				seen := map[string]int{}
				cookie := uint64(0)
				for {
					var verf [8]byte
					proc := uint32(16)
					a := args(dir, cookie, verf, count)
					if plus {
						proc = 17
						a = args(dir, cookie, verf, count, count)
					}
					r := c.call(progNFS, 3, proc, authRoot, a)
					if n := len(r.body.b); n > int(count) {
						t.Fatalf("reply of %d bytes for count %d", n, count)
					}
					ents, eof, st := k.readdirPage(dir, cookie, count, plus)
					must(t, st, "readdir")
					for _, e := range ents {
						seen[e.name]++
					}
					if eof {
						break
					}
					cookie = ents[len(ents)-1].cookie
				}
				if len(seen) != 302 {
					t.Fatalf("listed %d names, want 302", len(seen))
				}
				for name, n := range seen {
					if n != 1 {
						t.Fatalf("%s listed %d times", name, n)
					}
				}
			})
		}
	}
	// A buffer too small for one entry: TOOSMALL, never BAD_COOKIE.
	var verf [8]byte
	d := c.nfs(16, authRoot, args(dir, uint64(0), verf, 50))
	if st := status(t, d); st != nfs.NFSStatusTooSmall {
		t.Fatalf("tiny READDIR: %d", st)
	}
	// A cookie the directory never gave (or one of a deleted entry)
	// still resumes somewhere sane.
	d = c.nfs(16, authRoot, args(dir, uint64(1)<<62, verf, 4096))
	if st := status(t, d); st == nfs.NFSStatusBadCookie {
		t.Fatal("BAD_COOKIE")
	}
}

// Listing a directory while files are created and removed in it: every
// entry that exists throughout is listed exactly once, and new entries
// appear at most once.
func TestReaddirWhileChanging(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	dir, _, _ := k.mkdir(root, "d", 0o755)
	createMany(t, c, dir, "old", 200)
	for _, plus := range []bool{false, true} {
		t.Run(fmt.Sprintf("plus=%v", plus), func(t *testing.T) {
			gone := fmt.Sprintf("gone%v-", plus)
			createMany(t, c, dir, gone, 100)
			seen := map[string]int{}
			cookie := uint64(0)
			page := 0
			for {
				ents, eof, st := k.readdirPage(dir, cookie, 1024, plus)
				must(t, st, "readdir")
				for _, e := range ents {
					seen[e.name]++
				}
				if eof {
					break
				}
				cookie = ents[len(ents)-1].cookie
				// Between pages: new files, and removal of files not yet
				// listed and already listed.
				createMany(t, c, dir, fmt.Sprintf("new%v-%03d-", plus, page), 5)
				page++
				if page <= 100 {
					must(t, k.remove(dir, fmt.Sprintf("%s%05d", gone, page-1)), "remove")
				}
			}
			for i := range 200 {
				if n := seen[fmt.Sprintf("old%05d", i)]; n != 1 {
					t.Fatalf("old%05d listed %d times", i, n)
				}
			}
			for name, n := range seen {
				if n != 1 {
					t.Fatalf("%s listed %d times", name, n)
				}
			}
		})
	}
}

// rm -rf of a directory with 10,000 entries, the way clients do it:
// READDIR a page, REMOVE what it lists, READDIR again from the start.
func TestRemoveLargeDirectory(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	dir, _, _ := k.mkdir(root, "big", 0o755)
	const n = 10000
	createMany(t, c, dir, "f", n)
	if ents := k.readdirAll(dir, 64<<10, true); len(ents) != n+2 {
		t.Fatalf("listed %d entries, want %d", len(ents), n+2)
	}
	removed := 0
	cookie := uint64(0)
	for {
		ents, eof, st := k.readdirPage(dir, cookie, 8192, false)
		must(t, st, "readdir")
		for _, e := range ents {
			if e.name == "." || e.name == ".." {
				continue
			}
			must(t, k.remove(dir, e.name), "remove "+e.name)
			removed++
		}
		if eof {
			break
		}
		cookie = ents[len(ents)-1].cookie
	}
	if removed != n {
		t.Fatalf("removed %d, want %d", removed, n)
	}
	must(t, k.rmdir(root, "big"), "rmdir")
}

// attrsOf fetches a batch's attributes in parallel: each in its entry's
// place, nil for an entry removed since the listing.
func TestAttrsOf(t *testing.T) {
	m := newManager(t, "")
	v, _, err := m.View("main")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, attrsPerWorker * 2, 300} {
		dir, err := v.Mkdir(cowfs.RootIno, fmt.Sprintf("d%d", n), cowfs.NewAttr{Mode: 0o755})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if _, err := v.Create(dir.Ino, fmt.Sprintf("f%03d", i), cowfs.CreateUnchecked, cowfs.NewAttr{Mode: 0o644}, 0); err != nil {
				t.Fatal(err)
			}
		}
		ents, _, err := v.ReadDir(dir.Ino, 0, 1024)
		if err != nil || len(ents) != n {
			t.Fatalf("ReadDir: %d entries, %v; want %d", len(ents), err, n)
		}
		if err := v.Unlink(dir.Ino, ents[n-1].Name); err != nil {
			t.Fatal(err)
		}
		attrs := attrsOf(v, ents)
		for i, e := range ents {
			switch a := attrs[i]; {
			case i == n-1 && a != nil:
				t.Errorf("n=%d: removed entry %s has attributes", n, e.Name)
			case i < n-1 && (a == nil || a.Ino != e.Ino):
				t.Errorf("n=%d: entry %d (%s, inode %d): attributes %+v", n, i, e.Name, e.Ino, a)
			}
		}
	}
}

package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// A regular user (uid 501 in group staff, 20, when the tests run as root)
// runs `serve` on a fresh store and works in main through NFS with the RPC
// patterns of macOS's client.
func TestMacOSUserOnFreshStore(t *testing.T) {
	u := regularUser
	store := newStore(t)
	srv := startServer(t, store, 0)
	mac := dialMac(t, srv.port, u)
	root := mac.mnt("/main")
	adm := dialMac(t, srv.port, rootUser)
	admRoot := adm.mnt("/main")

	t.Run("main belongs to the user who ran serve", func(t *testing.T) {
		a, st := mac.getattr(root)
		if st != nfsOK {
			t.Fatalf("GETATTR: %d", st)
		}
		if a.uid != u.uid || a.gid != u.gid || a.mode != 0o755 {
			t.Fatalf("main's root is %d:%d mode %o, want %d:%d mode 755", a.uid, a.gid, a.mode, u.uid, u.gid)
		}
	})

	t.Run("create and mkdir with sattr ids", func(t *testing.T) {
		fh, a, st := mac.create(root, "hello.txt", 0o644, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("CREATE with sattr %d:%d: status %d", u.uid, u.gid, st)
		}
		if a.uid != u.uid || a.gid != u.gid || a.mode != 0o644 {
			t.Fatalf("created %d:%d mode %o", a.uid, a.gid, a.mode)
		}
		if st := mac.write(fh, 0, []byte("hello\n")); st != nfsOK {
			t.Fatalf("WRITE: %d", st)
		}
		_, a, st = mac.mkdir(root, "src", 0o755, &u.uid, &u.gid)
		if st != nfsOK || a.uid != u.uid || a.gid != u.gid || a.mode != 0o755 || a.typ != 2 {
			t.Fatalf("MKDIR with sattr ids: status %d, %+v", st, a)
		}
		// A directory whose group the user is not in (set by root): the
		// client sends the directory's gid, as BSD gives it to new files.
		shared, _, st := mac.mkdir(root, "shared", 0o777, nil, nil)
		if st != nfsOK {
			t.Fatalf("MKDIR shared: %d", st)
		}
		sharedAdm, _, _ := adm.lookup(admRoot, "shared")
		admin := uint32(80)
		if st := adm.setattrGID(sharedAdm, admin); st != nfsOK {
			t.Fatalf("root chgrp: %d", st)
		}
		_, a, st = mac.create(shared, "f", 0o644, &u.uid, &admin)
		if st != nfsOK || a.gid != admin || a.uid != u.uid {
			t.Fatalf("CREATE with the directory's gid %d: status %d, owner %d:%d", admin, st, a.uid, a.gid)
		}
		_, a, st = mac.mkdir(shared, "d", 0o755, &u.uid, &admin)
		if st != nfsOK || a.gid != admin {
			t.Fatalf("MKDIR with the directory's gid: status %d, gid %d", st, a.gid)
		}
		// Without ids the new file gets the caller's uid and group.
		_, a, st = mac.create(shared, "g", 0o644, nil, nil)
		if st != nfsOK || a.gid != u.gid || a.uid != u.uid {
			t.Fatalf("CREATE without ids: status %d, owner %d:%d", st, a.uid, a.gid)
		}
		// Another user's uid, or a group neither the user's nor the
		// directory's, is refused and creates nothing.
		other, foreign := u.uid+1, uint32(4242)
		if _, _, st := mac.create(root, "theirs", 0o644, &other, &u.gid); st != nfsPerm {
			t.Fatalf("CREATE with another uid: status %d, want EPERM", st)
		}
		if _, _, st := mac.create(root, "theirs", 0o644, &u.uid, &foreign); st != nfsPerm {
			t.Fatalf("CREATE with a foreign gid: status %d, want EPERM", st)
		}
		if _, _, st := mac.lookup(root, "theirs"); st != nfsNoEnt {
			t.Fatalf("refused CREATE left a file (LOOKUP %d)", st)
		}
	})

	t.Run("AppleDouble lookups around create, rename and remove", func(t *testing.T) {
		noent := func(name string) {
			t.Helper()
			if _, _, st := mac.lookup(root, name); st != nfsNoEnt {
				t.Fatalf("LOOKUP %s: %d, want NOENT", name, st)
			}
		}
		noent("notes.txt")
		noent("._notes.txt")
		fh, _, st := mac.create(root, "notes.txt", 0o644, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("CREATE: %d", st)
		}
		noent("._notes.txt")
		// Finder keeps extended attributes in the AppleDouble file.
		ad, _, st := mac.create(root, "._notes.txt", 0o644, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("CREATE ._notes.txt: %d", st)
		}
		if st := mac.write(ad, 0, []byte("\x00\x05\x16\x07AppleDouble")); st != nfsOK {
			t.Fatalf("WRITE ._notes.txt: %d", st)
		}
		noent("._renamed.txt")
		if st := mac.rename(root, "notes.txt", root, "renamed.txt"); st != nfsOK {
			t.Fatalf("RENAME: %d", st)
		}
		if st := mac.rename(root, "._notes.txt", root, "._renamed.txt"); st != nfsOK {
			t.Fatalf("RENAME AppleDouble: %d", st)
		}
		noent("notes.txt")
		noent("._notes.txt")
		if _, a, st := mac.lookup(root, "renamed.txt"); st != nfsOK {
			t.Fatalf("LOOKUP renamed.txt: %d", st)
		} else if fa, _ := mac.getattr(fh); fa.fileid != a.fileid {
			t.Fatal("rename changed the file id")
		}
		for _, n := range []string{"renamed.txt", "._renamed.txt"} {
			if st := mac.remove(root, n); st != nfsOK {
				t.Fatalf("REMOVE %s: %d", n, st)
			}
			noent(n)
		}
		noent("._renamed.txt")
	})

	t.Run("silly rename in macOS's format", func(t *testing.T) {
		fh, a, st := mac.create(root, "open.txt", 0o644, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("CREATE: %d", st)
		}
		mac.write(fh, 0, []byte("still open"))
		// The client looks names up until one is free, renames the open
		// file to it, and removes it at the last close.
		silly := fmt.Sprintf(".nfs.%08x.%04x", uint32(0x20051025+a.fileid), 4242&0xffff)
		if _, _, st := mac.lookup(root, silly); st != nfsNoEnt {
			t.Fatalf("LOOKUP %s: %d", silly, st)
		}
		if st := mac.rename(root, "open.txt", root, silly); st != nfsOK {
			t.Fatalf("RENAME to %s: %d", silly, st)
		}
		if st := mac.write(fh, 10, []byte(", written")); st != nfsOK {
			t.Fatalf("WRITE after silly rename: %d", st)
		}
		if b, st := mac.read(fh); st != nfsOK || string(b) != "still open, written" {
			t.Fatalf("READ after silly rename: %d %q", st, b)
		}
		if st := mac.remove(root, silly); st != nfsOK {
			t.Fatalf("REMOVE %s: %d", silly, st)
		}
		if _, st := mac.getattr(fh); st != nfsStale {
			t.Fatalf("GETATTR of the removed file: %d, want STALE", st)
		}
		for _, n := range mac.readdirplusAll(root, 4096, nil) {
			if strings.HasPrefix(n, ".nfs.") {
				t.Fatalf("READDIRPLUS still lists %s", n)
			}
		}
	})

	t.Run("READDIRPLUS echoing the cookie verifier", func(t *testing.T) {
		dir, _, st := mac.mkdir(root, "many", 0o755, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("MKDIR: %d", st)
		}
		want := []string{".", ".."}
		for i := 0; i < 300; i++ {
			n := fmt.Sprintf("file-%03d.go", i)
			if _, _, st := mac.create(dir, n, 0o644, &u.uid, &u.gid); st != nfsOK {
				t.Fatalf("CREATE %s: %d", n, st)
			}
			want = append(want, n)
		}
		// Pages of about 4 KiB, and the directory changes between pages:
		// every entry present throughout is listed once, and no page is
		// answered BAD_COOKIE (macOS would take it as the end).
		got := mac.readdirplusAll(dir, 4096, func() {
			for i := 0; i < 20; i++ {
				mac.create(dir, fmt.Sprintf("new-%02d", i), 0o644, nil, nil)
			}
			mac.remove(dir, "new-00")
		})
		seen := map[string]int{}
		for _, n := range got {
			seen[n]++
		}
		for _, n := range want {
			if seen[n] != 1 {
				t.Errorf("%s listed %d times", n, seen[n])
			}
		}
		if seen["new-00"] != 0 {
			t.Error("a name removed before the next page was listed")
		}
		// A verifier from an older listing (or a zero one) is no reason
		// for BAD_COOKIE either.
		_, cookies, _, _, st := mac.readdirplusPage(dir, 0, [8]byte{}, 4096)
		if st != nfsOK || len(cookies) == 0 {
			t.Fatalf("READDIRPLUS first page: %d", st)
		}
		for _, v := range [][8]byte{{}, {1, 2, 3, 4, 5, 6, 7, 8}} {
			if _, _, _, _, st := mac.readdirplusPage(dir, cookies[len(cookies)-1], v, 4096); st != nfsOK {
				t.Fatalf("READDIRPLUS at cookie %d with verifier %x: %d", cookies[len(cookies)-1], v, st)
			}
		}
	})

	t.Run("owner chmods and touches a 0444 file", func(t *testing.T) {
		// Go's module cache and git's objects are 0444; tools chmod them.
		fh, _, st := mac.create(root, "object", 0o444, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("CREATE 0444: %d", st)
		}
		got, st := mac.access(fh, accessAll)
		if st != nfsOK {
			t.Fatalf("ACCESS: %d", st)
		}
		if got&accessModify == 0 {
			t.Fatalf("ACCESS %#x: no MODIFY, so macOS refuses chmod and utimes itself", got)
		}
		if got&accessExtend != 0 {
			t.Fatalf("ACCESS %#x: EXTEND on a read-only file", got)
		}
		rw := uint32(0o644)
		if st := mac.setattr(fh, &rw, false); st != nfsOK {
			t.Fatalf("chmod u+w: %d", st)
		}
		ro := uint32(0o444)
		if st := mac.setattr(fh, &ro, false); st != nfsOK {
			t.Fatalf("chmod back: %d", st)
		}
		if st := mac.setattr(fh, nil, true); st != nfsOK {
			t.Fatalf("touch: %d", st)
		}
		// Another user gets no MODIFY and no chmod.
		other := osUser{uid: u.uid + 1, gid: u.gid, groups: []uint32{u.gid}}
		o := dialMac(t, srv.port, other)
		if got, _ := o.access(fh, accessAll); got&(accessModify|accessExtend) != 0 {
			t.Fatalf("another user's ACCESS %#x", got)
		}
		if st := o.setattr(fh, &rw, false); st != nfsPerm {
			t.Fatalf("chmod by another user: %d", st)
		}
	})

	t.Run("CLI as the same user", func(t *testing.T) {
		mustCLI(t, store, "fork", "main", "work")
		if d := mustCLI(t, store, "diff", "work"); !strings.HasPrefix(d, "0 change(s)") {
			t.Fatalf("diff of a fresh fork: %q", d)
		}
		mustCLI(t, store, "abort", "work", "--force")
	})
}

// setattrGID sends SETATTR with a gid only.
func (m *macClient) setattrGID(fh []byte, gid uint32) uint32 {
	m.t.Helper()
	var e xdrEnc
	e.opaque(fh)
	e.sattr(nil, nil, &gid, false)
	e.u32(0)
	return m.nfs(procSetattr, e.b).u32()
}

// Names arrive in NFC from shells and in NFD from Cocoa apps, and macOS
// drops its caches of a directory only when the directory's mtime
// changes: a commit that merges into main must change the mtime of every
// directory whose entries it changed.
func TestMacOSNFDNamesAndMergeMtime(t *testing.T) {
	u := regularUser
	store := newStore(t)
	srv := startServer(t, store, 0)
	mac := dialMac(t, srv.port, u)
	root := mac.mnt("/main")

	t.Run("NFC and NFD name one file", func(t *testing.T) {
		const nfc, nfd = "caf\u00e9.txt", "cafe\u0301.txt"
		_, a, st := mac.create(root, nfc, 0o644, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("CREATE NFC: %d", st)
		}
		_, b, st := mac.lookup(root, nfd)
		if st != nfsOK || b.fileid != a.fileid {
			t.Fatalf("LOOKUP in NFD: status %d, fileid %d, want %d", st, b.fileid, a.fileid)
		}
		if _, _, st := mac.create(root, nfd, 0o644, &u.uid, &u.gid); st != nfsExist {
			t.Fatalf("CREATE GUARDED in NFD of an NFC name: %d, want EXIST", st)
		}
		names := mac.readdirplusAll(root, 4096, nil)
		sort.Strings(names)
		n := 0
		for _, x := range names {
			if x == nfc {
				n++
			}
			if x == nfd {
				t.Fatalf("READDIRPLUS returns the NFD form of a name stored in NFC")
			}
		}
		if n != 1 {
			t.Fatalf("READDIRPLUS lists %s %d times: %q", nfc, n, names)
		}
	})

	t.Run("merge commit changes the parent's directory mtime", func(t *testing.T) {
		src, _, st := mac.mkdir(root, "src", 0o755, &u.uid, &u.gid)
		if st != nfsOK {
			t.Fatalf("MKDIR: %d", st)
		}
		mustCLI(t, store, "fork", "main", "feature")
		fm := dialMac(t, srv.port, u)
		froot := fm.mnt("/feature")
		fsrc, _, st := fm.lookup(froot, "src")
		if st != nfsOK {
			t.Fatalf("LOOKUP src in the fork: %d", st)
		}
		if _, _, st := fm.create(fsrc, "new.go", 0o644, &u.uid, &u.gid); st != nfsOK {
			t.Fatalf("CREATE in the fork: %d", st)
		}
		// main changes too, so the commit merges instead of swapping.
		if _, _, st := mac.create(src, "main.go", 0o644, &u.uid, &u.gid); st != nfsOK {
			t.Fatalf("CREATE in main: %d", st)
		}
		if _, _, st := mac.lookup(src, "new.go"); st != nfsNoEnt {
			t.Fatalf("LOOKUP before the commit: %d", st) // cached negative on a Mac
		}
		before, _ := mac.getattr(src)
		time.Sleep(10 * time.Millisecond)
		out := mustCLI(t, store, "commit", "feature", "--force", "--json")
		if !strings.Contains(out, `"fast_path": false`) {
			t.Fatalf("commit took the fast path, so nothing merged: %s", out)
		}
		after, _ := mac.getattr(src)
		if after.mtime == before.mtime {
			t.Fatalf("src's mtime %v did not change with the merge: a Mac keeps its cached listing and negative entries", after.mtime)
		}
		if after.ctime == before.ctime {
			t.Fatalf("src's ctime %v did not change with the merge", after.ctime)
		}
		if _, _, st := mac.lookup(src, "new.go"); st != nfsOK {
			t.Fatalf("LOOKUP after the commit: %d", st)
		}
	})
}

package nfsserver

import (
	"testing"

	nfs "github.com/willscott/go-nfs"
)

// Permission checks for non-root AUTH_UNIX callers, per POSIX.
func TestPermissions(t *testing.T) {
	_, c, root := setup(t)
	rootK := c.as(authRoot)
	alice := c.as(authSys(1000, 1000, 1000, 50))
	bob := c.as(authSys(1001, 1001))
	anon := c.as(authNone)

	shared, _, st := rootK.mkdir(root, "shared", 0o777)
	must(t, st, "mkdir shared")
	rofile, _, st := rootK.create(shared, "ro", 1, sa{mode: u32p(0o444)})
	must(t, st, "create ro")
	locked, _, st := rootK.mkdir(root, "locked", 0o755)
	must(t, st, "mkdir locked")
	_, _, st = rootK.create(locked, "inside", 1, sa{mode: u32p(0o666)})
	must(t, st, "create inside")

	t.Run("created files belong to the caller", func(t *testing.T) {
		_, a, st := alice.create(shared, "mine", 1, sa{mode: u32p(0o644)})
		must(t, st, "create")
		if a.uid != 1000 || a.gid != 1000 {
			t.Fatalf("owner %d:%d", a.uid, a.gid)
		}
		_, a, st = anon.create(shared, "anon", 1, sa{mode: u32p(0o644)})
		must(t, st, "anon create")
		if a.uid != 65534 || a.gid != 65534 {
			t.Fatalf("AUTH_NULL owner %d:%d", a.uid, a.gid)
		}
	})
	t.Run("write to 0444 file of another user", func(t *testing.T) {
		if _, _, _, st := alice.write(rofile, 0, []byte("x"), fileSync); st != nfs.NFSStatusAccess {
			t.Fatalf("WRITE: %d", st)
		}
		if st := alice.setattr(rofile, sa{size: u64p(0)}); st != nfs.NFSStatusAccess {
			t.Fatalf("truncate: %d", st)
		}
		// Root may.
		if _, _, _, st := rootK.write(rofile, 0, []byte("x"), fileSync); st != 0 {
			t.Fatalf("root WRITE: %d", st)
		}
	})
	t.Run("no write permission on the directory", func(t *testing.T) {
		if st := alice.remove(locked, "inside"); st != nfs.NFSStatusAccess {
			t.Fatalf("unlink: %d", st)
		}
		if _, _, st := alice.create(locked, "new", 1, sa{}); st != nfs.NFSStatusAccess {
			t.Fatalf("create: %d", st)
		}
		if _, _, st := alice.mkdir(locked, "new", 0o755); st != nfs.NFSStatusAccess {
			t.Fatalf("mkdir: %d", st)
		}
		if st := alice.rename(locked, "inside", shared, "stolen"); st != nfs.NFSStatusAccess {
			t.Fatalf("rename: %d", st)
		}
	})
	t.Run("no search permission", func(t *testing.T) {
		closed, _, st := rootK.mkdir(root, "closed", 0o700)
		must(t, st, "mkdir")
		if _, _, st := alice.lookup(closed, "x"); st != nfs.NFSStatusAccess {
			t.Fatalf("lookup: %d", st)
		}
		if _, _, st := alice.readdirPage(closed, 0, 4096, false); st != nfs.NFSStatusAccess {
			t.Fatalf("readdir: %d", st)
		}
	})
	t.Run("chmod and chown", func(t *testing.T) {
		if st := alice.setattr(rofile, sa{mode: u32p(0o666)}); st != nfs.NFSStatusPerm {
			t.Fatalf("chmod of another's file: %d", st)
		}
		mine, _, _ := alice.lookup(shared, "mine")
		must(t, alice.setattr(mine, sa{mode: u32p(0o600)}), "chmod own file")
		if st := alice.setattr(mine, sa{uid: u32p(1001)}); st != nfs.NFSStatusPerm {
			t.Fatalf("give away: %d", st)
		}
		if st := alice.setattr(mine, sa{gid: u32p(1001)}); st != nfs.NFSStatusPerm {
			t.Fatalf("chgrp to a foreign group: %d", st)
		}
		must(t, alice.setattr(mine, sa{gid: u32p(50)}), "chgrp to own supplementary group")
		if a, _ := alice.getattr(mine); a.gid != 50 {
			t.Fatalf("gid %d", a.gid)
		}
		if st := bob.setattr(mine, sa{gid: u32p(1001)}); st != nfs.NFSStatusPerm {
			t.Fatalf("chgrp by non-owner: %d", st)
		}
		must(t, rootK.setattr(mine, sa{uid: u32p(1001)}), "root chown")
		// Setgid of a group the caller is not in is dropped on chmod.
		must(t, bob.setattr(mine, sa{mode: u32p(0o2755)}), "chmod setgid")
		if a, _ := bob.getattr(mine); a.mode != 0o755 {
			t.Fatalf("mode %o, want setgid dropped", a.mode)
		}
	})
	t.Run("times", func(t *testing.T) {
		openFile, _, _ := rootK.create(shared, "open", 1, sa{mode: u32p(0o666)})
		if st := alice.setattr(openFile, sa{mtimeHow: setToClientTime, mtime: [2]uint32{5, 0}}); st != nfs.NFSStatusPerm {
			t.Fatalf("client time by non-owner: %d", st)
		}
		must(t, alice.setattr(openFile, sa{mtimeHow: setToServerTime, atimeHow: setToServerTime}), "server time with write permission")
		if st := alice.setattr(rofile, sa{mtimeHow: setToServerTime}); st != nfs.NFSStatusAccess {
			t.Fatalf("server time without write permission: %d", st)
		}
	})
	t.Run("sticky directory", func(t *testing.T) {
		tmp, _, _ := rootK.mkdir(root, "tmp", 0o1777)
		_, _, st := bob.create(tmp, "bobs", 1, sa{mode: u32p(0o666)})
		must(t, st, "create")
		if st := alice.remove(tmp, "bobs"); st != nfs.NFSStatusPerm {
			t.Fatalf("remove another's file in sticky dir: %d", st)
		}
		if st := alice.rename(tmp, "bobs", tmp, "x"); st != nfs.NFSStatusPerm {
			t.Fatalf("rename another's file in sticky dir: %d", st)
		}
		must(t, bob.remove(tmp, "bobs"), "owner removes")
	})
	t.Run("setgid directory", func(t *testing.T) {
		sg, _, _ := rootK.mkdir(root, "sg", 0o777)
		must(t, rootK.setattr(sg, sa{mode: u32p(0o2777), gid: u32p(77)}), "setgid dir")
		_, a, st := alice.create(sg, "f", 1, sa{})
		must(t, st, "create")
		if a.gid != 77 {
			t.Fatalf("gid %d, want the directory's", a.gid)
		}
		_, a, st = alice.mkdir(sg, "d", 0o755)
		must(t, st, "mkdir")
		if a.gid != 77 || a.mode&0o2000 == 0 {
			t.Fatalf("subdir gid %d mode %o", a.gid, a.mode)
		}
	})
	t.Run("devices need root", func(t *testing.T) {
		if _, _, st := alice.mknod(shared, "chr", 4, 0o644, 1, 1); st != nfs.NFSStatusPerm {
			t.Fatalf("mknod chr: %d", st)
		}
		_, _, st := alice.mknod(shared, "fifo", 7, 0o644, 0, 0)
		must(t, st, "mknod fifo")
	})
	t.Run("access", func(t *testing.T) {
		const all = access3Read | access3Lookup | access3Modify | access3Extend | access3Delete | access3Execute
		exe, _, _ := rootK.create(shared, "exe", 1, sa{mode: u32p(0o750)})
		must(t, rootK.setattr(exe, sa{gid: u32p(50)}), "chgrp")
		aliceRO, _, st := alice.create(shared, "alice-ro", 1, sa{mode: u32p(0o444)})
		must(t, st, "create alice-ro")
		aliceDir, _, st := alice.mkdir(shared, "alice-dir", 0o555)
		must(t, st, "mkdir alice-dir")
		// Her own mode-0477 FIFO, socket and character device: a FIFO or
		// a device is written through its open, which the Linux client
		// allows on any one of MODIFY, EXTEND or DELETE; only the mode
		// may grant them.
		aliceFIFO, _, st := alice.mknod(shared, "alice-fifo", 7, 0o477, 0, 0)
		must(t, st, "mknod alice-fifo")
		aliceSock, _, st := alice.mknod(shared, "alice-sock", 6, 0o477, 0, 0)
		must(t, st, "mknod alice-sock")
		aliceChr, _, st := rootK.mknod(shared, "alice-chr", 4, 0o477, 1, 3)
		must(t, st, "mknod alice-chr")
		must(t, rootK.setattr(aliceChr, sa{uid: u32p(1000), mode: u32p(0o477)}), "chown alice-chr")
		aliceFIFOrw, _, st := alice.mknod(shared, "alice-fifo-rw", 7, 0o677, 0, 0)
		must(t, st, "mknod alice-fifo-rw")
		cases := []struct {
			name string
			k    caller
			fh   []byte
			want uint32
		}{
			{"root on 0444 file", rootK, rofile, access3Read | access3Modify | access3Extend},
			{"alice on 0444 file", alice, rofile, access3Read},
			{"alice on her own 0444 file", alice, aliceRO, access3Read | access3Modify},
			{"alice on her own 0555 dir", alice, aliceDir, access3Read | access3Lookup | access3Modify},
			{"root on 0750 file", rootK, exe, access3Read | access3Modify | access3Extend | access3Execute},
			{"alice (group 50) on 0750 file", alice, exe, access3Read | access3Execute},
			{"bob on 0750 file", bob, exe, 0},
			{"alice on 0777 dir", alice, shared, access3Read | access3Lookup | access3Modify | access3Extend | access3Delete},
			{"alice on 0755 dir", alice, locked, access3Read | access3Lookup},
			{"alice on her own 0477 FIFO", alice, aliceFIFO, access3Read},
			{"alice on her own 0477 socket", alice, aliceSock, access3Read},
			{"alice on her own 0477 char device", alice, aliceChr, access3Read},
			{"alice on her own 0677 FIFO", alice, aliceFIFOrw, access3Read | access3Modify | access3Extend},
		}
		for _, tc := range cases {
			got, st := tc.k.access(tc.fh, all)
			must(t, st, "access")
			if got != tc.want {
				t.Errorf("%s: %#x, want %#x", tc.name, got, tc.want)
			}
		}
	})
	t.Run("owner writes own read-only file", func(t *testing.T) {
		// open(O_CREAT|O_WRONLY, 0444) then write is legal POSIX: the
		// owner may write through an open file whatever its mode.
		fh, _, st := alice.create(shared, "ro-own", 1, sa{mode: u32p(0o444)})
		must(t, st, "create")
		_, _, _, st = alice.write(fh, 0, []byte("ok"), fileSync)
		must(t, st, "owner write")
	})
}

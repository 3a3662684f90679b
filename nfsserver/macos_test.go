package nfsserver

import (
	"testing"

	nfs "github.com/willscott/go-nfs"
)

// What macOS's client sends as a regular user (uid 501, group staff 20):
// sattr uid and gid on every create, and ACCESS MODIFY before chmod and
// utimes of the user's own files.
func TestMacOSCreateOwners(t *testing.T) {
	_, c, root := setup(t)
	rootK := c.as(authRoot)
	mac := c.as(authSys(501, 20, 20, 12, 61))

	// A directory of another group (80, admin), writable by the user.
	dir, _, st := rootK.mkdir(root, "work", 0o777)
	must(t, st, "mkdir")
	must(t, rootK.setattr(dir, sa{gid: u32p(80)}), "chgrp dir")

	mkdirSA := func(k caller, d []byte, name string, s sa) ([]byte, fattr, nfs.NFSStatus) {
		return k.created(k.c.nfs(9, k.cr, append(args(d, name), s.enc()...)))
	}
	symlinkSA := func(k caller, d []byte, name, target string, s sa) ([]byte, fattr, nfs.NFSStatus) {
		a := append(append(args(d, name), s.enc()...), args(target)...)
		return k.created(k.c.nfs(10, k.cr, a))
	}
	fifoSA := func(k caller, d []byte, name string, s sa) ([]byte, fattr, nfs.NFSStatus) {
		return k.created(k.c.nfs(11, k.cr, append(args(d, name, uint32(7)), s.enc()...)))
	}
	type op func(name string, s sa) (fattr, nfs.NFSStatus)
	ops := map[string]op{
		"CREATE": func(name string, s sa) (fattr, nfs.NFSStatus) {
			_, a, st := mac.create(dir, name, 0, s)
			return a, st
		},
		"MKDIR": func(name string, s sa) (fattr, nfs.NFSStatus) {
			_, a, st := mkdirSA(mac, dir, name, s)
			return a, st
		},
		"SYMLINK": func(name string, s sa) (fattr, nfs.NFSStatus) {
			_, a, st := symlinkSA(mac, dir, name, "target", s)
			return a, st
		},
		"MKNOD": func(name string, s sa) (fattr, nfs.NFSStatus) {
			_, a, st := fifoSA(mac, dir, name, s)
			return a, st
		},
	}
	cases := []struct {
		name     string
		uid, gid *uint32
		want     nfs.NFSStatus
		wantGID  uint32
	}{
		{"no ids: the caller's group", nil, nil, 0, 20},
		{"own uid, directory's gid", u32p(501), u32p(80), 0, 80},
		{"own uid, primary gid", u32p(501), u32p(20), 0, 20},
		{"own uid, supplementary gid", u32p(501), u32p(61), 0, 61},
		{"foreign gid", u32p(501), u32p(5), nfs.NFSStatusPerm, 0},
		{"foreign uid", u32p(0), u32p(80), nfs.NFSStatusPerm, 0},
	}
	for opName, do := range ops {
		for i, tc := range cases {
			t.Run(opName+"/"+tc.name, func(t *testing.T) {
				name := opName + "-" + string(rune('a'+i))
				a, st := do(name, sa{mode: u32p(0o755), uid: tc.uid, gid: tc.gid})
				if st != tc.want {
					t.Fatalf("status %d, want %d", st, tc.want)
				}
				if st != 0 {
					if _, _, st := mac.lookup(dir, name); st != nfs.NFSStatusNoEnt {
						t.Fatalf("refused create left %q behind (lookup %d)", name, st)
					}
					return
				}
				if a.uid != 501 || a.gid != tc.wantGID {
					t.Fatalf("owner %d:%d, want 501:%d", a.uid, a.gid, tc.wantGID)
				}
			})
		}
	}

	t.Run("root may give any owner", func(t *testing.T) {
		_, a, st := rootK.create(dir, "given", 0, sa{uid: u32p(501), gid: u32p(5)})
		must(t, st, "create")
		if a.uid != 501 || a.gid != 5 {
			t.Fatalf("owner %d:%d", a.uid, a.gid)
		}
	})
}

// macOS asks ACCESS for MODIFY before chmod and utimes (and refuses them
// itself without it), then sends SETATTR. The owner of a read-only file
// must pass both, and still not be offered EXTEND (open for writing).
func TestMacOSOwnerChmodReadOnly(t *testing.T) {
	_, c, root := setup(t)
	rootK := c.as(authRoot)
	mac := c.as(authSys(501, 20, 20))
	other := c.as(authSys(502, 20, 20))
	dir, _, st := rootK.mkdir(root, "home", 0o777)
	must(t, st, "mkdir")

	const all = access3Read | access3Lookup | access3Modify | access3Extend | access3Delete | access3Execute
	ro, _, st := mac.create(dir, "obj", 0, sa{mode: u32p(0o444), uid: u32p(501), gid: u32p(20)})
	must(t, st, "create 0444")

	got, st := mac.access(ro, all)
	must(t, st, "access")
	if got&access3Modify == 0 {
		t.Fatalf("owner's ACCESS on own 0444 file %#x lacks MODIFY: chmod u+w and touch fail on macOS", got)
	}
	if got&access3Extend != 0 {
		t.Fatalf("owner's ACCESS on own 0444 file %#x offers EXTEND", got)
	}
	must(t, mac.setattr(ro, sa{mode: u32p(0o644)}), "chmod u+w")
	must(t, mac.setattr(ro, sa{mode: u32p(0o444)}), "chmod back to 0444")
	must(t, mac.setattr(ro, sa{atimeHow: setToClientTime, atime: [2]uint32{1e9, 5}, mtimeHow: setToClientTime, mtime: [2]uint32{1e9, 7}}), "utimes")
	must(t, mac.setattr(ro, sa{atimeHow: setToServerTime, mtimeHow: setToServerTime}), "touch")
	if a, _ := mac.getattr(ro); a.mode != 0o444 {
		t.Fatalf("mode %o after touch", a.mode)
	}

	// Someone else in the group gets neither MODIFY nor the SETATTR.
	got, st = other.access(ro, all)
	must(t, st, "access by other")
	if got&(access3Modify|access3Extend) != 0 {
		t.Fatalf("non-owner's ACCESS %#x grants a change", got)
	}
	if st := other.setattr(ro, sa{mode: u32p(0o666)}); st != nfs.NFSStatusPerm {
		t.Fatalf("chmod by non-owner: %d", st)
	}

	// A 0555 directory (Go's module cache): chmod u+w by its owner.
	d, _, st := mac.mkdir(dir, "mod@v1", 0o555)
	must(t, st, "mkdir 0555")
	got, st = mac.access(d, all)
	must(t, st, "access dir")
	if got&access3Modify == 0 {
		t.Fatalf("owner's ACCESS on own 0555 dir %#x lacks MODIFY", got)
	}
	// MODIFY lets the client try; the server still refuses entry changes.
	if _, _, st := mac.create(d, "x", 0, sa{}); st != nfs.NFSStatusAccess {
		t.Fatalf("create in 0555 dir: %d", st)
	}
	must(t, mac.setattr(d, sa{mode: u32p(0o755)}), "chmod u+w dir")
	_, _, st = mac.create(d, "x", 0, sa{})
	must(t, st, "create after chmod u+w")
}

package nfsserver

import "github.com/branchnfs/branchnfs/cowfs"

// Permission bits as in the rwx triplets of a mode.
const (
	mayRead  = 4
	mayWrite = 2
	mayExec  = 1
)

// ACCESS3 bits.
const (
	access3Read    = 0x01
	access3Lookup  = 0x02
	access3Modify  = 0x04
	access3Extend  = 0x08
	access3Delete  = 0x10
	access3Execute = 0x20
)

func (c *cred) isRoot() bool { return c.uid == 0 }

func (c *cred) owns(a *cowfs.Attr) bool { return c.uid == a.UID }

// may reports whether the caller has every permission in want (mayRead,
// mayWrite, mayExec) on a, per POSIX: the owner triplet for the owner, the
// group triplet for members of the file's group, the other triplet for the
// rest. Root has every permission, except execute on a non-directory with
// no execute bit at all.
func (c *cred) may(a *cowfs.Attr, want uint32) bool {
	if c.isRoot() {
		if want&mayExec != 0 && a.Type != cowfs.TypeDir && a.Mode&0o111 == 0 {
			return false
		}
		return true
	}
	var bits uint32
	switch {
	case c.uid == a.UID:
		bits = a.Mode >> 6
	case c.inGroup(a.GID):
		bits = a.Mode >> 3
	default:
		bits = a.Mode
	}
	return bits&7&want == want
}

// access computes the ACCESS3 bits granted on a, restricted to want.
//
// The owner of a regular file or a directory is granted MODIFY whatever
// the mode. macOS's client asks ACCESS
// for MODIFY before a chmod, chown, utimes or extended-attribute change
// (nfs_vnop_access maps KAUTH_VNODE_WRITE_ATTRIBUTES and WRITE_SECURITY to
// MODIFY) and refuses them locally without it, although SETATTR lets the
// owner make those changes; WRITE lets the owner write whatever the mode,
// too. EXTEND still follows the mode: macOS and Linux both count a regular
// file writable only with MODIFY and EXTEND, so an open for writing of the
// owner's read-only file is still refused by the client, as on a local disk.
// A FIFO, a device or a socket follows its mode alone: for those, Linux's
// client takes any one of MODIFY, EXTEND or DELETE as leave to open for
// writing, so the owner's 0477 FIFO would open read-write.
func (c *cred) access(a *cowfs.Attr, want uint32) uint32 {
	var got uint32
	if c.may(a, mayRead) {
		got |= access3Read
	}
	if a.Type == cowfs.TypeDir {
		x := c.may(a, mayExec)
		if x {
			got |= access3Lookup
		}
		if x && c.may(a, mayWrite) {
			got |= access3Modify | access3Extend | access3Delete
		}
	} else {
		if c.may(a, mayWrite) {
			got |= access3Modify | access3Extend
		}
		if c.may(a, mayExec) {
			got |= access3Execute
		}
	}
	if c.owns(a) && (a.Type == cowfs.TypeRegular || a.Type == cowfs.TypeDir) {
		got |= access3Modify
	}
	return got & want
}

// stickyDenies reports whether the sticky bit of dir forbids the caller to
// remove or rename the entry victim: only the owner of the entry, the owner
// of the directory and root may.
func (c *cred) stickyDenies(dir, victim *cowfs.Attr) bool {
	return c.stickyApplies(dir) && !c.owns(victim)
}

// stickyApplies reports whether the sticky-directory rule restricts which
// of dir's entries the caller may remove: only then does the entry's
// owner matter.
func (c *cred) stickyApplies(dir *cowfs.Attr) bool {
	return dir.Mode&cowfs.ModeSticky != 0 && !c.isRoot() && !c.owns(dir)
}

// newGID is the group of a file created in dir when the caller names none:
// the directory's group when it is setgid, else the caller's primary group,
// as on Linux (knfsd). Linux's client never names a group, and its users
// expect this; macOS's client names one whenever its own choice (BSD: the
// directory's group) differs from the caller's group, see newAttr.
func (c *cred) newGID(dir *cowfs.Attr) uint32 {
	if dir.Mode&cowfs.ModeSetgid != 0 {
		return dir.GID
	}
	return c.gid
}

// mayGiveGID reports whether the caller may create a file in dir with group
// g: root any group, others one of their own groups or the directory's.
func (c *cred) mayGiveGID(dir *cowfs.Attr, g uint32) bool {
	return c.isRoot() || g == dir.GID || c.inGroup(g)
}

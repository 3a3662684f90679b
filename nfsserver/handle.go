package nfsserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// File handle layout (44 bytes; NFSv3 allows up to 64):
//
//	[0]      version (1)
//	[1]      flags: bit 0 = reached through the root export "/"
//	[2:4]    zero
//	[4:12]   branch id   (big endian; 0 = the synthetic root export)
//	[12:20]  inode number
//	[20:28]  generation
//	[28:44]  first 16 bytes of HMAC-SHA256(secret, bytes [0:28])
//
// The handle names an inode, not a path, so it survives renames of the file
// and of its parents, copy-on-write of the file, and server restarts (the
// secret lives in the store). The MAC keeps a client from forging a handle
// into another branch or inode. The flag keeps handles met under "/" apart
// from handles of a branch export: they report a different fsid and fileid
// (see fileid) so one mount of "/" never shows two branches' files with the
// same (fsid, fileid).
const (
	handleLen     = 44
	handleVersion = 1
	flagViaRoot   = 1
	macLen        = 16

	// rootBranch is the reserved branch id of the synthetic root export.
	rootBranch branches.BranchID = 0
)

// errBadHandle: a handle of the wrong size, version or MAC.
var errBadHandle = errors.New("nfsserver: bad file handle")

// fileHandle is a decoded handle.
type fileHandle struct {
	viaRoot bool
	branch  branches.BranchID
	ino     cowfs.InodeID
	gen     cowfs.Gen
}

// rootHandle is the handle of the synthetic root directory of export "/".
var rootHandle = fileHandle{viaRoot: true, branch: rootBranch, ino: cowfs.RootIno}

// child returns the handle of an inode in the same branch, reached the same
// way (through "/" or not) as h.
func (h fileHandle) child(ino cowfs.InodeID, gen cowfs.Gen) fileHandle {
	return fileHandle{viaRoot: h.viaRoot, branch: h.branch, ino: ino, gen: gen}
}

func (h fileHandle) isSyntheticRoot() bool { return h.branch == rootBranch }

// fsid is the file system id reported for h: the branch id for a branch
// export (so two mounted branches never look like one device), 0 for
// everything reached through "/".
func (h fileHandle) fsid() uint64 {
	if h.viaRoot {
		return 0
	}
	return uint64(h.branch)
}

// fileid is the file id reported for inode ino seen through h. For a branch
// export it is the inode number. Through "/" every branch shares fsid 0, so
// the branch id goes in the top 24 bits and the inode number in the low 40:
// unique as long as inode numbers stay below 2^40 and branch ids below 2^24.
// The synthetic root itself has fileid 1.
func (h fileHandle) fileid(ino cowfs.InodeID) uint64 {
	if !h.viaRoot || h.branch == rootBranch {
		return uint64(ino)
	}
	return uint64(h.branch)<<40 | uint64(ino)&(1<<40-1)
}

func (s *Server) mac(dst, msg []byte) []byte {
	hp, _ := s.macs.Get().(*hash.Hash)
	if hp == nil {
		h := hmac.New(sha256.New, s.secret)
		hp = &h
	}
	h := *hp
	h.Reset()
	h.Write(msg)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	s.macs.Put(hp)
	return append(dst, out[:macLen]...)
}

// encodeHandle returns the wire form of h.
func (s *Server) encodeHandle(h fileHandle) []byte {
	b := make([]byte, 28, handleLen)
	b[0] = handleVersion
	if h.viaRoot {
		b[1] = flagViaRoot
	}
	binary.BigEndian.PutUint64(b[4:], uint64(h.branch))
	binary.BigEndian.PutUint64(b[12:], uint64(h.ino))
	binary.BigEndian.PutUint64(b[20:], uint64(h.gen))
	return s.mac(b, b)
}

// decodeHandle checks and decodes a handle. Anything we did not issue gives
// errBadHandle.
func (s *Server) decodeHandle(b []byte) (fileHandle, error) {
	if len(b) != handleLen || b[0] != handleVersion || b[1]&^flagViaRoot != 0 || b[2] != 0 || b[3] != 0 {
		return fileHandle{}, errBadHandle
	}
	var buf [28 + macLen]byte
	want := s.mac(buf[:0], b[:28])
	if !hmac.Equal(want, b[28:]) {
		return fileHandle{}, errBadHandle
	}
	h := fileHandle{
		viaRoot: b[1]&flagViaRoot != 0,
		branch:  branches.BranchID(binary.BigEndian.Uint64(b[4:])),
		ino:     cowfs.InodeID(binary.BigEndian.Uint64(b[12:])),
		gen:     cowfs.Gen(binary.BigEndian.Uint64(b[20:])),
	}
	if h.branch == rootBranch && (!h.viaRoot || h.ino != cowfs.RootIno) {
		return fileHandle{}, errBadHandle
	}
	return h, nil
}

package nfsserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync/atomic"

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

// handleCache remembers handles the server issued or verified, so that a
// handle seen again needs no MAC: every call carries one that
// decodeHandle checks (an HMAC-SHA256, 0.3-0.9 us on the 2-core machine),
// and every LOOKUP, CREATE and READDIRPLUS entry gets one from
// encodeHandle. It is a direct-mapped table, a slot per hash of the
// handle's first 28 bytes (what the MAC covers), and a newer handle of the
// same slot replaces the older one. A handle is only ever stored after its
// MAC was computed with the server's secret, and a presented handle counts
// as verified only when all its 44 bytes equal a stored one, so the cache
// accepts nothing the MAC would refuse.
//
// A slot is a sequence number and the handle in six words, all atomic (no
// allocation per handle stored, no lock): a writer makes the sequence odd
// with a compare-and-swap, writes the words and makes it even again; a
// reader that sees it odd, or changed while it read, counts a miss.
type handleCache [handleCacheSlots]handleSlot

type handleSlot struct {
	seq atomic.Uint64
	w   [handleWords]atomic.Uint64
}

const (
	handleCacheBits  = 12
	handleCacheSlots = 1 << handleCacheBits // 4096 slots of 56 bytes
	handleWords      = (handleLen + 7) / 8
)

// handleWordsOf packs a handle's bytes (n of them: 28 for the part the
// MAC covers, handleLen for all) into words, zero-padded.
func handleWordsOf(b []byte, n int) (w [handleWords]uint64) {
	var buf [handleWords * 8]byte
	copy(buf[:], b[:n])
	for i := range w {
		w[i] = binary.BigEndian.Uint64(buf[i*8:])
	}
	return w
}

// slot returns the slot of a handle by its first 28 bytes.
func (c *handleCache) slot(b []byte) *handleSlot {
	x := binary.BigEndian.Uint64(b[12:]) ^ binary.BigEndian.Uint64(b[4:])*0x9e3779b97f4a7c15 ^
		binary.BigEndian.Uint64(b[20:])*0xbf58476d1ce4e5b9 ^ uint64(b[1])
	x *= 0x94d049bb133111eb
	return &c[x>>(64-handleCacheBits)]
}

// load reads a slot's handle; ok is false if it is empty or being written.
func (sl *handleSlot) load() (w [handleWords]uint64, ok bool) {
	s1 := sl.seq.Load()
	if s1 == 0 || s1&1 != 0 {
		return w, false
	}
	for i := range w {
		w[i] = sl.w[i].Load()
	}
	return w, sl.seq.Load() == s1
}

// verified reports whether b (a whole handle) is stored.
func (c *handleCache) verified(b []byte) bool {
	if c == nil {
		return false
	}
	got, ok := c.slot(b).load()
	if !ok {
		return false
	}
	want := handleWordsOf(b, handleLen)
	var diff uint64 // constant time: no early exit on the first difference
	for i := range got {
		diff |= got[i] ^ want[i]
	}
	return diff == 0
}

// macOf appends to dst (the 28 bytes the MAC covers) the MAC of a stored
// handle with those bytes; ok is false when none is stored.
func (c *handleCache) macOf(dst []byte) ([]byte, bool) {
	if c == nil {
		return dst, false
	}
	got, ok := c.slot(dst).load()
	if !ok {
		return dst, false
	}
	want := handleWordsOf(dst, 28)
	// The first 3 words and the top half of the fourth are bytes 0-27.
	// (^ and | bind alike in Go: each difference in its own parentheses.)
	diff := (got[0] ^ want[0]) | (got[1] ^ want[1]) | (got[2] ^ want[2]) | (got[3]^want[3])>>32
	if diff != 0 {
		return dst, false
	}
	var buf [handleWords * 8]byte
	for i, x := range got {
		binary.BigEndian.PutUint64(buf[i*8:], x)
	}
	return append(dst, buf[28:handleLen]...), true
}

// store remembers b, a handle whose MAC is right. A slot another writer
// holds is left to it.
func (c *handleCache) store(b []byte) {
	if c == nil {
		return
	}
	sl := c.slot(b)
	s := sl.seq.Load()
	if s&1 != 0 || !sl.seq.CompareAndSwap(s, s+1) {
		return
	}
	for i, x := range handleWordsOf(b, handleLen) {
		sl.w[i].Store(x)
	}
	sl.seq.Store(s + 2)
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
	if b, ok := s.handles.macOf(b); ok {
		return b
	}
	b = s.mac(b, b)
	s.handles.store(b)
	return b
}

// decodeHandle checks and decodes a handle. Anything we did not issue gives
// errBadHandle.
func (s *Server) decodeHandle(b []byte) (fileHandle, error) {
	if len(b) != handleLen || b[0] != handleVersion || b[1]&^flagViaRoot != 0 || b[2] != 0 || b[3] != 0 {
		return fileHandle{}, errBadHandle
	}
	if !s.handles.verified(b) {
		var buf [28 + macLen]byte
		want := s.mac(buf[:0], b[:28])
		if !hmac.Equal(want, b[28:]) {
			return fileHandle{}, errBadHandle
		}
		s.handles.store(b)
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

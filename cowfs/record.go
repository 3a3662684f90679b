package cowfs

import (
	"encoding/binary"
	"errors"
	"time"
)

// link is one name of an inode: the directory holding it and the name.
type link struct {
	Dir  InodeID
	Name string
}

// inode is the stored form of an inode in one layer.
type inode struct {
	Ino      InodeID
	Gen      Gen
	Type     FileType
	Mode     uint32
	Nlink    uint32 // directories: 2 + subdirectories; others: len(Links)
	UID, GID uint32
	Size     uint64
	Used     uint64
	Rdev     uint64
	Atime    int64 // ns since the epoch
	Mtime    int64
	Ctime    int64
	// Cut: data of lower layers at offsets >= Cut is hidden (the file was
	// truncated below it while this layer held the inode).
	Cut uint64
	// Stale: the layer's own block references from block StaleFrom on
	// are leftovers of a truncate still being purged (purgeStale), not
	// data: the size committed first, and nothing writes or grows the
	// file past it until they are gone.
	Stale     bool
	StaleFrom uint64
	Deleted   bool // tombstone: the inode is gone in this layer and above
	HasVerf   bool
	Verifier  uint64
	Links     []link
	Target    string // symlink target
}

const recVersion = 1

// size estimates the memory of a decoded record with its names.
func (n *inode) size() int {
	sz := 192 + len(n.Target)
	for _, l := range n.Links {
		sz += 24 + len(l.Name)
	}
	return sz
}

var errCorrupt = errors.New("cowfs: corrupt record")

func (n *inode) encode() []byte {
	b := make([]byte, 0, 128+len(n.Target))
	b = append(b, recVersion, byte(n.Type))
	var flags byte
	if n.Deleted {
		flags |= 1
	}
	if n.HasVerf {
		flags |= 2
	}
	if n.Stale {
		flags |= 4 // StaleFrom follows the target
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(n.Gen))
	b = binary.BigEndian.AppendUint32(b, n.Mode)
	b = binary.BigEndian.AppendUint32(b, n.Nlink)
	b = binary.BigEndian.AppendUint32(b, n.UID)
	b = binary.BigEndian.AppendUint32(b, n.GID)
	for _, v := range []uint64{n.Size, n.Used, n.Rdev, uint64(n.Atime), uint64(n.Mtime), uint64(n.Ctime), n.Cut, n.Verifier} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(n.Links)))
	for _, l := range n.Links {
		b = binary.BigEndian.AppendUint64(b, uint64(l.Dir))
		b = binary.BigEndian.AppendUint16(b, uint16(len(l.Name)))
		b = append(b, l.Name...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(n.Target)))
	b = append(b, n.Target...)
	if n.Stale {
		b = binary.BigEndian.AppendUint64(b, n.StaleFrom)
	}
	return b
}

func decodeInode(ino InodeID, b []byte) (*inode, error) {
	const fixed = 3 + 8 + 16 + 64 + 2
	if len(b) < fixed || b[0] != recVersion {
		return nil, errCorrupt
	}
	n := &inode{Ino: ino, Type: FileType(b[1])}
	n.Deleted = b[2]&1 != 0
	n.HasVerf = b[2]&2 != 0
	p := 3
	n.Gen = Gen(binary.BigEndian.Uint64(b[p:]))
	p += 8
	n.Mode = binary.BigEndian.Uint32(b[p:])
	n.Nlink = binary.BigEndian.Uint32(b[p+4:])
	n.UID = binary.BigEndian.Uint32(b[p+8:])
	n.GID = binary.BigEndian.Uint32(b[p+12:])
	p += 16
	v := make([]uint64, 8)
	for i := range v {
		v[i] = binary.BigEndian.Uint64(b[p:])
		p += 8
	}
	n.Size, n.Used, n.Rdev = v[0], v[1], v[2]
	n.Atime, n.Mtime, n.Ctime = int64(v[3]), int64(v[4]), int64(v[5])
	n.Cut, n.Verifier = v[6], v[7]
	cnt := int(binary.BigEndian.Uint16(b[p:]))
	p += 2
	for i := 0; i < cnt; i++ {
		if len(b) < p+10 {
			return nil, errCorrupt
		}
		d := InodeID(binary.BigEndian.Uint64(b[p:]))
		l := int(binary.BigEndian.Uint16(b[p+8:]))
		p += 10
		if len(b) < p+l {
			return nil, errCorrupt
		}
		n.Links = append(n.Links, link{d, string(b[p : p+l])})
		p += l
	}
	if len(b) < p+4 {
		return nil, errCorrupt
	}
	l := int(binary.BigEndian.Uint32(b[p:]))
	p += 4
	if len(b) < p+l {
		return nil, errCorrupt
	}
	n.Target = string(b[p : p+l])
	p += l
	if b[2]&4 != 0 {
		if len(b) < p+8 {
			return nil, errCorrupt
		}
		n.Stale, n.StaleFrom = true, binary.BigEndian.Uint64(b[p:])
	}
	return n, nil
}

func (n *inode) clone() *inode {
	c := *n
	c.Links = append([]link(nil), n.Links...)
	return &c
}

func (n *inode) attr() Attr {
	a := Attr{
		Ino: n.Ino, Gen: n.Gen, Type: n.Type, Mode: n.Mode & ModePerm,
		Nlink: n.Nlink, UID: n.UID, GID: n.GID, Size: n.Size, Used: n.Used, Rdev: n.Rdev,
		Atime: time.Unix(0, n.Atime), Mtime: time.Unix(0, n.Mtime), Ctime: time.Unix(0, n.Ctime),
	}
	if len(n.Links) > 0 {
		a.Parent, a.Name = n.Links[0].Dir, n.Links[0].Name
	} else if n.Ino == RootIno {
		a.Parent = RootIno
	}
	if n.Type == TypeSymlink {
		a.Size = uint64(len(n.Target))
	}
	return a
}

// entry is a stored directory entry; Ino 0 is a whiteout.
type entry struct {
	Ino  InodeID
	Type FileType
	Name string
}

func (e entry) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(e.Ino))
	b = append(b, byte(e.Type))
	return append(b, e.Name...)
}

func decodeEntry(b []byte) (entry, error) {
	if len(b) < 9 {
		return entry{}, errCorrupt
	}
	return entry{Ino: InodeID(binary.BigEndian.Uint64(b)), Type: FileType(b[8]), Name: string(b[9:])}, nil
}

// Block references. A block is stored by content hash, inline (small
// blocks), or as zeros (a hole that hides inherited data).
const (
	refHash   = 1
	refInline = 2
	refZero   = 3
	// refPatch: a content-addressed base block plus small in-place edits,
	// so a 10-byte write into an inherited block stores ~50 bytes, not a
	// block: refPatch, hash(32), then (offset u32, length u32, bytes)...
	refPatch = 4
	// maxPatchBytes bounds the edits a patch reference carries; beyond it
	// the block is stored whole.
	maxPatchBytes = 1024
	// refChunks: the block is slices of content-defined chunks (see
	// chunk.go), concatenated, plus optional edits as in a patch:
	// refChunks, count(1), then count times [hash(32) offset(4) length(4)],
	// then (offset u32, length u32, bytes)...
	refChunks = 5
	// refExtent: the blocks of an extent (see extent.go), under an extent
	// key: refExtent, blocks(4), then [hash(32) offset(4) length(4)]...
	refExtent = 6
)

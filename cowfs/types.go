package cowfs

import "time"

// InodeID is a stable 64-bit inode number. Inode numbers are allocated from
// one store-wide counter and never reused, so an InodeID names the same file
// in every branch that inherited it. RootIno is the root directory of every
// branch.
type InodeID uint64

// Gen is an inode's generation. Together with the InodeID it identifies one
// incarnation of a file; NFS file handles carry both.
type Gen uint64

// LayerID names one layer of a layer stack. Layers are allocated from one
// store-wide counter and never reused.
type LayerID uint64

// RootIno is the inode number of the root directory of every tree.
const RootIno InodeID = 1

// FileType is the type of an inode.
type FileType uint8

// File types. The numbering matches NFSv3's ftype3.
const (
	TypeRegular FileType = iota + 1
	TypeDir
	TypeBlock
	TypeChar
	TypeSymlink
	TypeSocket
	TypeFIFO
)

func (t FileType) String() string {
	switch t {
	case TypeRegular:
		return "file"
	case TypeDir:
		return "dir"
	case TypeBlock:
		return "block"
	case TypeChar:
		return "char"
	case TypeSymlink:
		return "symlink"
	case TypeSocket:
		return "socket"
	case TypeFIFO:
		return "fifo"
	}
	return "unknown"
}

// Mode bits beyond the nine permission bits, as in POSIX.
const (
	ModeSetuid = 0o4000
	ModeSetgid = 0o2000
	ModeSticky = 0o1000
	ModePerm   = 0o7777 // every bit Attr.Mode may hold
)

// Attr is the metadata of one inode, as seen through a view.
type Attr struct {
	Ino   InodeID
	Gen   Gen
	Type  FileType
	Mode  uint32 // POSIX permission bits, setuid/setgid/sticky included (ModePerm)
	Nlink uint32
	UID   uint32
	GID   uint32
	Size  uint64
	Used  uint64 // bytes allocated to the file's data
	Rdev  uint64 // device number of block and char devices: major<<32 | minor

	Atime, Mtime, Ctime time.Time

	// Parent is the directory holding the inode's first link (RootIno for the
	// root itself). Name is that link's name ("" for the root).
	Parent InodeID
	Name   string
}

// SetAttr says which attributes SetAttr changes: nil fields stay as they are.
// Any change updates ctime; a size change also updates mtime.
type SetAttr struct {
	Mode  *uint32
	UID   *uint32
	GID   *uint32
	Size  *uint64
	Atime *time.Time
	Mtime *time.Time
	// KillSetID clears setuid, and setgid when the group may execute, in
	// the same transaction as the size change, unless Mode is set: what a
	// truncate by a caller without privilege does (Linux's rule). It
	// applies only together with Size.
	KillSetID bool
}

// WriteOptions modifies WriteAtOpts.
type WriteOptions struct {
	// KillSetID clears setuid, and setgid when the group may execute, in
	// the same transaction as the data: what a non-empty write by a
	// caller without privilege does (Linux's rule).
	KillSetID bool
}

// killSetID returns mode without the bits a write or truncate by a
// caller without privilege clears: setuid always, setgid only with group
// execute (without it, setgid marks mandatory locking and stays).
func killSetID(mode uint32) uint32 {
	mode &^= ModeSetuid
	if mode&0o010 != 0 {
		mode &^= ModeSetgid
	}
	return mode
}

// CreateHow selects the semantics of Create, as NFSv3's createmode3.
type CreateHow int

const (
	// CreateUnchecked creates the file, or opens an existing regular file
	// without truncating it.
	CreateUnchecked CreateHow = iota
	// CreateGuarded fails with EEXIST if the name exists.
	CreateGuarded
	// CreateExclusive stores the verifier with the new file. A retry with the
	// same verifier succeeds and returns the file; any other existing file
	// gives EEXIST.
	CreateExclusive
)

// NewAttr holds the initial attributes of a created inode.
type NewAttr struct {
	Mode uint32 // permission bits (ModePerm)
	UID  uint32
	GID  uint32
	Rdev uint64 // for TypeBlock and TypeChar
	// Times, when non-zero, replace the creation time for atime and mtime.
	Atime, Mtime time.Time
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string
	Ino  InodeID
	Type FileType
	// Cookie is a stable position: ReadDir(dir, Cookie, n) resumes right
	// after this entry, even if the directory changed in between. Cookies
	// are never 0, 1 or 2 (reserved for the start, "." and "..").
	Cookie uint64
}

// StatFS describes the space of the store.
type StatFS struct {
	TotalBytes, FreeBytes, AvailBytes uint64
	TotalFiles, FreeFiles             uint64
}

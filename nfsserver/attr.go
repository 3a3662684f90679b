package nfsserver

import (
	"math"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
)

// fattr3 is 84 bytes on the wire.
const fattrSize = 84

func putTime(e *encoder, t time.Time) {
	sec := t.Unix()
	nsec := uint32(t.Nanosecond())
	switch {
	case t.IsZero() || sec < 0:
		sec, nsec = 0, 0
	case sec > math.MaxUint32:
		sec, nsec = math.MaxUint32, 999999999
	}
	e.u32(uint32(sec))
	e.u32(nsec)
}

// putFattr encodes a as fattr3, with the fsid and fileid of handle h's
// export (see fileHandle.fsid and fileid).
func putFattr(e *encoder, h fileHandle, a *cowfs.Attr) {
	e.u32(uint32(a.Type))
	e.u32(a.Mode & cowfs.ModePerm)
	e.u32(a.Nlink)
	e.u32(a.UID)
	e.u32(a.GID)
	e.u64(a.Size)
	e.u64(a.Used)
	e.u32(uint32(a.Rdev >> 32)) // specdata1: major
	e.u32(uint32(a.Rdev))       // specdata2: minor
	e.u64(h.fsid())
	e.u64(h.fileid(a.Ino))
	putTime(e, a.Atime)
	putTime(e, a.Mtime)
	putTime(e, a.Ctime)
}

// putPostOp encodes post_op_attr; a nil a means "no attributes".
func putPostOp(e *encoder, h fileHandle, a *cowfs.Attr) {
	if a == nil {
		e.bool(false)
		return
	}
	e.bool(true)
	putFattr(e, h, a)
}

// putWcc encodes wcc_data: the pre-operation size and times of the object
// and its post-operation attributes. Either may be nil.
func putWcc(e *encoder, h fileHandle, pre, post *cowfs.Attr) {
	if pre == nil {
		e.bool(false)
	} else {
		e.bool(true)
		e.u64(pre.Size)
		putTime(e, pre.Mtime)
		putTime(e, pre.Ctime)
	}
	putPostOp(e, h, post)
}

// time_how of sattr3.
const (
	dontChange      = 0
	setToServerTime = 1
	setToClientTime = 2
)

// sattr is a decoded sattr3: nil fields are not to be set.
type sattr struct {
	mode, uid, gid     *uint32
	size               *uint64
	atimeHow, mtimeHow uint32
	atime, mtime       time.Time
	atimeBad, mtimeBad bool // nanoseconds out of range
}

func decodeSattr(d *decoder) (sa sattr) {
	u32p := func() *uint32 {
		if d.bool() {
			v := d.u32()
			return &v
		}
		return nil
	}
	sa.mode = u32p()
	sa.uid = u32p()
	sa.gid = u32p()
	if d.bool() {
		v := d.u64()
		sa.size = &v
	}
	decodeHow := func() (how uint32, t time.Time, bad bool) {
		how = d.u32()
		switch how {
		case dontChange, setToServerTime:
		case setToClientTime:
			sec, nsec := d.u32(), d.u32()
			bad = nsec >= 1e9
			t = time.Unix(int64(sec), int64(nsec))
		default:
			d.fail()
		}
		return
	}
	sa.atimeHow, sa.atime, sa.atimeBad = decodeHow()
	sa.mtimeHow, sa.mtime, sa.mtimeBad = decodeHow()
	return sa
}

// setsAny reports whether sa asks for any change.
func (sa *sattr) setsAny() bool {
	return sa.mode != nil || sa.uid != nil || sa.gid != nil || sa.size != nil ||
		sa.atimeHow != dontChange || sa.mtimeHow != dontChange
}

func (sa *sattr) validate() error {
	if sa.atimeBad || sa.mtimeBad {
		return syscall.EINVAL
	}
	return nil
}

package nfsserver

import (
	"context"
	"testing"

	nfs "github.com/willscott/go-nfs"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// newManager opens branches over a fresh in-memory Badger store (or an
// on-disk one in dir when dir is not "").
func newManager(tb testing.TB, dir string) *branches.Manager {
	tb.Helper()
	if dir == "" {
		return branchestest.NewManager(tb, branches.Options{Store: kvtest.NewStore(tb)})
	}
	m, closeFn := openManager(tb, dir)
	tb.Cleanup(closeFn)
	return m
}

// openManager is newManager with the closing left to the caller.
func openManager(tb testing.TB, dir string) (*branches.Manager, func()) {
	tb.Helper()
	st, err := kv.OpenBadger(dir, kv.BadgerOptions{InMemory: dir == "", GCInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := branches.Open(context.Background(), branches.Options{Store: st})
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	return m, func() {
		m.Close()
		st.Close()
	}
}

// caller issues NFS calls with one credential.
type caller struct {
	c  *rawClient
	cr auth
}

func (c *rawClient) as(cr auth) caller { return caller{c: c, cr: cr} }

func status(tb testing.TB, d *decoder) nfs.NFSStatus {
	tb.Helper()
	st := d.u32()
	if d.err != nil {
		tb.Fatal("short reply")
	}
	return nfs.NFSStatus(st)
}

// must fails the test unless st is NFS3_OK.
func must(tb testing.TB, st nfs.NFSStatus, what string) {
	tb.Helper()
	if st != nfs.NFSStatusOk {
		tb.Fatalf("%s: status %d (%s)", what, uint32(st), st)
	}
}

func (k caller) getattr(fh []byte) (fattr, nfs.NFSStatus) {
	d := k.c.nfs(1, k.cr, args(fh))
	st := status(k.c.tb, d)
	if st != 0 {
		return fattr{}, st
	}
	return readFattr(d), st
}

func (k caller) lookup(dir []byte, name string) ([]byte, fattr, nfs.NFSStatus) {
	d := k.c.nfs(3, k.cr, args(dir, name))
	st := status(k.c.tb, d)
	if st != 0 {
		return nil, fattr{}, st
	}
	fh := append([]byte(nil), d.opaque(fhSize)...)
	a := readPostOp(d)
	if a == nil {
		k.c.tb.Fatal("LOOKUP without attributes")
	}
	return fh, *a, st
}

// sa is a sattr3 to send.
type sa struct {
	mode, uid, gid     *uint32
	size               *uint64
	atimeHow, mtimeHow uint32
	atime, mtime       [2]uint32
}

func u32p(v uint32) *uint32 { return &v }
func u64p(v uint64) *uint64 { return &v }

func (s sa) enc() []byte {
	var e encoder
	for _, p := range []*uint32{s.mode, s.uid, s.gid} {
		e.bool(p != nil)
		if p != nil {
			e.u32(*p)
		}
	}
	e.bool(s.size != nil)
	if s.size != nil {
		e.u64(*s.size)
	}
	for _, t := range []struct {
		how uint32
		v   [2]uint32
	}{{s.atimeHow, s.atime}, {s.mtimeHow, s.mtime}} {
		e.u32(t.how)
		if t.how == setToClientTime {
			e.u32(t.v[0])
			e.u32(t.v[1])
		}
	}
	return e.b
}

// created decodes the result of CREATE, MKDIR, SYMLINK and MKNOD.
func (k caller) created(d *decoder) ([]byte, fattr, nfs.NFSStatus) {
	st := status(k.c.tb, d)
	if st != 0 {
		return nil, fattr{}, st
	}
	if !d.bool() {
		k.c.tb.Fatal("no handle in reply")
	}
	fh := append([]byte(nil), d.opaque(fhSize)...)
	a := readPostOp(d)
	skipWcc(d)
	if a == nil || d.err != nil {
		k.c.tb.Fatal("bad create reply")
	}
	return fh, *a, st
}

func (k caller) create(dir []byte, name string, how uint32, s sa) ([]byte, fattr, nfs.NFSStatus) {
	a := append(args(dir, name, how), s.enc()...)
	return k.created(k.c.nfs(8, k.cr, a))
}

func (k caller) createExcl(dir []byte, name string, verf [8]byte) ([]byte, fattr, nfs.NFSStatus) {
	return k.created(k.c.nfs(8, k.cr, args(dir, name, 2, verf)))
}

func (k caller) mkdir(dir []byte, name string, mode uint32) ([]byte, fattr, nfs.NFSStatus) {
	a := append(args(dir, name), sa{mode: u32p(mode)}.enc()...)
	return k.created(k.c.nfs(9, k.cr, a))
}

func (k caller) symlink(dir []byte, name, target string) ([]byte, fattr, nfs.NFSStatus) {
	a := append(args(dir, name), sa{}.enc()...)
	a = append(a, args(target)...)
	return k.created(k.c.nfs(10, k.cr, a))
}

func (k caller) mknod(dir []byte, name string, typ uint32, mode uint32, major, minor uint32) ([]byte, fattr, nfs.NFSStatus) {
	a := args(dir, name, typ)
	switch typ {
	case 3, 4:
		a = append(a, sa{mode: u32p(mode)}.enc()...)
		a = append(a, args(major, minor)...)
	case 6, 7:
		a = append(a, sa{mode: u32p(mode)}.enc()...)
	}
	return k.created(k.c.nfs(11, k.cr, a))
}

func (k caller) write(fh []byte, off uint64, data []byte, stable uint32) (count, committed uint32, verf []byte, st nfs.NFSStatus) {
	d := k.c.nfs(7, k.cr, args(fh, off, uint32(len(data)), stable, data))
	if st = status(k.c.tb, d); st != 0 {
		return
	}
	skipWcc(d)
	count, committed = d.u32(), d.u32()
	verf = append([]byte(nil), d.fixed(8)...)
	return
}

func (k caller) read(fh []byte, off uint64, count uint32) (data []byte, eof bool, st nfs.NFSStatus) {
	d := k.c.nfs(6, k.cr, args(fh, off, count))
	if st = status(k.c.tb, d); st != 0 {
		return
	}
	readPostOp(d)
	n := d.u32()
	eof = d.bool()
	data = append([]byte(nil), d.opaque(maxIO)...)
	if d.err != nil || int(n) != len(data) {
		k.c.tb.Fatalf("bad READ reply: count %d, data %d", n, len(data))
	}
	return
}

func (k caller) setattr(fh []byte, s sa) nfs.NFSStatus {
	return status(k.c.tb, k.c.nfs(2, k.cr, append(append(args(fh), s.enc()...), args(false)...)))
}

func (k caller) remove(dir []byte, name string) nfs.NFSStatus {
	return status(k.c.tb, k.c.nfs(12, k.cr, args(dir, name)))
}

func (k caller) rmdir(dir []byte, name string) nfs.NFSStatus {
	return status(k.c.tb, k.c.nfs(13, k.cr, args(dir, name)))
}

func (k caller) rename(from []byte, fromName string, to []byte, toName string) nfs.NFSStatus {
	return status(k.c.tb, k.c.nfs(14, k.cr, args(from, fromName, to, toName)))
}

func (k caller) link(fh, dir []byte, name string) (*fattr, nfs.NFSStatus) {
	d := k.c.nfs(15, k.cr, args(fh, dir, name))
	st := status(k.c.tb, d)
	if st != 0 {
		return nil, st
	}
	return readPostOp(d), st
}

func (k caller) access(fh []byte, want uint32) (uint32, nfs.NFSStatus) {
	d := k.c.nfs(4, k.cr, args(fh, want))
	st := status(k.c.tb, d)
	if st != 0 {
		return 0, st
	}
	readPostOp(d)
	return d.u32(), st
}

// dirent is one READDIR(PLUS) entry.
type dirent struct {
	fileid uint64
	name   string
	cookie uint64
	attr   *fattr
	fh     []byte
}

// readdirPage reads one page of a directory.
func (k caller) readdirPage(dir []byte, cookie uint64, count uint32, plus bool) (ents []dirent, eof bool, st nfs.NFSStatus) {
	var verf [8]byte
	var d *decoder
	if plus {
		d = k.c.nfs(17, k.cr, args(dir, cookie, verf, count, count))
	} else {
		d = k.c.nfs(16, k.cr, args(dir, cookie, verf, count))
	}
	if st = status(k.c.tb, d); st != 0 {
		return
	}
	readPostOp(d)
	d.fixed(8)
	for d.bool() {
		var e dirent
		e.fileid = d.u64()
		e.name = d.string(maxNameXDR)
		e.cookie = d.u64()
		if plus {
			e.attr = readPostOp(d)
			if d.bool() {
				e.fh = append([]byte(nil), d.opaque(fhSize)...)
			}
		}
		ents = append(ents, e)
	}
	eof = d.bool()
	if d.err != nil {
		k.c.tb.Fatal("bad READDIR reply")
	}
	return
}

// readdirAll lists a whole directory in pages of count bytes.
func (k caller) readdirAll(dir []byte, count uint32, plus bool) []dirent {
	k.c.tb.Helper()
	var all []dirent
	cookie := uint64(0)
	for {
		ents, eof, st := k.readdirPage(dir, cookie, count, plus)
		must(k.c.tb, st, "READDIR")
		all = append(all, ents...)
		if eof {
			return all
		}
		if len(ents) == 0 {
			k.c.tb.Fatal("READDIR: empty page before eof")
		}
		cookie = ents[len(ents)-1].cookie
	}
}

func newAttrForTest() cowfs.NewAttr { return cowfs.NewAttr{Mode: 0o644} }

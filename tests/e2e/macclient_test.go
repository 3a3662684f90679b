package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// macClient speaks NFSv3 over raw RPC as one AUTH_SYS user, sending the
// calls macOS's client sends (sattr ids on create, cookie verifiers on
// READDIRPLUS), one call at a time on its own connection.
type macClient struct {
	t    *testing.T
	c    net.Conn
	xid  uint32
	cred []byte
}

// NFSv3 procedures and statuses used here.
const (
	procGetattr     = 1
	procSetattr     = 2
	procLookup      = 3
	procAccess      = 4
	procRead        = 6
	procWrite       = 7
	procCreate      = 8
	procMkdir       = 9
	procRemove      = 12
	procRename      = 14
	procReaddirplus = 17

	nfsOK      = 0
	nfsPerm    = 1
	nfsNoEnt   = 2
	nfsAccess  = 13
	nfsExist   = 17
	nfsStale   = 70
	nfsBadCook = 10003

	accessRead    = 0x01
	accessLookup  = 0x02
	accessModify  = 0x04
	accessExtend  = 0x08
	accessDelete  = 0x10
	accessExecute = 0x20
	accessAll     = 0x3f
)

func dialMac(t *testing.T, port int, u osUser) *macClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var e xdrEnc
	e.u32(uint32(time.Now().Unix()))
	e.str("macbook")
	e.u32(u.uid)
	e.u32(u.gid)
	e.u32(uint32(len(u.groups)))
	for _, g := range u.groups {
		e.u32(g)
	}
	return &macClient{t: t, c: c, cred: e.b}
}

type xdrEnc struct{ b []byte }

func (e *xdrEnc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *xdrEnc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *xdrEnc) opaque(p []byte) {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}
func (e *xdrEnc) str(s string) { e.opaque([]byte(s)) }

// sattr encodes a sattr3: mode, uid, gid when not nil; times set to the
// server's time when serverTime.
func (e *xdrEnc) sattr(mode, uid, gid *uint32, serverTime bool) {
	for _, p := range []*uint32{mode, uid, gid} {
		if p == nil {
			e.u32(0)
		} else {
			e.u32(1)
			e.u32(*p)
		}
	}
	e.u32(0) // size
	how := uint32(0)
	if serverTime {
		how = 1
	}
	e.u32(how)
	e.u32(how)
}

type xdrDec struct {
	b   []byte
	err error
}

func (d *xdrDec) u32() uint32 {
	if len(d.b) < 4 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}
func (d *xdrDec) u64() uint64 { return uint64(d.u32())<<32 | uint64(d.u32()) }
func (d *xdrDec) opaque() []byte {
	n := int(d.u32())
	p := (n + 3) &^ 3
	if d.err != nil || len(d.b) < p {
		d.err = io.ErrUnexpectedEOF
		return nil
	}
	v := append([]byte(nil), d.b[:n]...)
	d.b = d.b[p:]
	return v
}
func (d *xdrDec) skip(n int) {
	if len(d.b) < n {
		d.err = io.ErrUnexpectedEOF
		return
	}
	d.b = d.b[n:]
}

// fattr is the part of fattr3 the tests look at.
type fattr struct {
	typ, mode, uid, gid uint32
	size, fileid        uint64
	mtime, ctime        [2]uint32
}

func (d *xdrDec) fattr() fattr {
	var a fattr
	a.typ, a.mode = d.u32(), d.u32()
	d.u32() // nlink
	a.uid, a.gid = d.u32(), d.u32()
	a.size = d.u64()
	d.skip(8 + 8 + 8) // used, rdev, fsid
	a.fileid = d.u64()
	d.skip(8) // atime
	a.mtime = [2]uint32{d.u32(), d.u32()}
	a.ctime = [2]uint32{d.u32(), d.u32()}
	return a
}

func (d *xdrDec) postOp() *fattr {
	if d.u32() == 0 {
		return nil
	}
	a := d.fattr()
	return &a
}

func (d *xdrDec) wcc() (post *fattr) {
	if d.u32() != 0 {
		d.skip(24)
	}
	return d.postOp()
}

// call sends one RPC and returns the decoder positioned after accept_stat
// SUCCESS.
func (m *macClient) call(prog, vers, proc uint32, args []byte) *xdrDec {
	m.t.Helper()
	m.xid++
	var e xdrEnc
	e.u32(0) // record mark, set below
	e.u32(m.xid)
	e.u32(0) // CALL
	e.u32(2)
	e.u32(prog)
	e.u32(vers)
	e.u32(proc)
	e.u32(1) // AUTH_SYS
	e.opaque(m.cred)
	e.u32(0) // verifier AUTH_NULL
	e.u32(0)
	e.b = append(e.b, args...)
	binary.BigEndian.PutUint32(e.b, 0x80000000|uint32(len(e.b)-4))
	m.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := m.c.Write(e.b); err != nil {
		m.t.Fatalf("send proc %d: %v", proc, err)
	}
	var rec []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(m.c, hdr[:]); err != nil {
			m.t.Fatalf("reply to proc %d: %v", proc, err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		frag := make([]byte, n&0x7fffffff)
		if _, err := io.ReadFull(m.c, frag); err != nil {
			m.t.Fatalf("reply to proc %d: %v", proc, err)
		}
		rec = append(rec, frag...)
		if n&0x80000000 != 0 {
			break
		}
	}
	d := &xdrDec{b: rec}
	if xid := d.u32(); xid != m.xid {
		m.t.Fatalf("xid %d, want %d", xid, m.xid)
	}
	d.u32() // REPLY
	if st := d.u32(); st != 0 {
		m.t.Fatalf("proc %d: reply_stat %d", proc, st)
	}
	d.u32()
	d.opaque() // verifier
	if st := d.u32(); st != 0 || d.err != nil {
		m.t.Fatalf("proc %d: accept_stat %d %v", proc, st, d.err)
	}
	return d
}

func (m *macClient) nfs(proc uint32, args []byte) *xdrDec { return m.call(100003, 3, proc, args) }

// mnt returns the root handle of export.
func (m *macClient) mnt(export string) []byte {
	m.t.Helper()
	var e xdrEnc
	e.str(export)
	d := m.call(100005, 3, 1, e.b)
	if st := d.u32(); st != 0 {
		m.t.Fatalf("MNT %s: status %d", export, st)
	}
	return d.opaque()
}

func (m *macClient) getattr(fh []byte) (fattr, uint32) {
	m.t.Helper()
	var e xdrEnc
	e.opaque(fh)
	d := m.nfs(procGetattr, e.b)
	if st := d.u32(); st != nfsOK {
		return fattr{}, st
	}
	return d.fattr(), nfsOK
}

func (m *macClient) lookup(dir []byte, name string) ([]byte, fattr, uint32) {
	m.t.Helper()
	var e xdrEnc
	e.opaque(dir)
	e.str(name)
	d := m.nfs(procLookup, e.b)
	if st := d.u32(); st != nfsOK {
		return nil, fattr{}, st
	}
	fh := d.opaque()
	a := d.postOp()
	if a == nil || d.err != nil {
		m.t.Fatalf("LOOKUP %s: no attributes", name)
	}
	return fh, *a, nfsOK
}

func (m *macClient) access(fh []byte, want uint32) (uint32, uint32) {
	m.t.Helper()
	var e xdrEnc
	e.opaque(fh)
	e.u32(want)
	d := m.nfs(procAccess, e.b)
	if st := d.u32(); st != nfsOK {
		return 0, st
	}
	d.postOp()
	return d.u32(), nfsOK
}

// created decodes CREATE/MKDIR results.
func (m *macClient) created(d *xdrDec, what string) ([]byte, fattr, uint32) {
	m.t.Helper()
	if st := d.u32(); st != nfsOK {
		return nil, fattr{}, st
	}
	if d.u32() == 0 {
		m.t.Fatalf("%s: no handle", what)
	}
	fh := d.opaque()
	a := d.postOp()
	if a == nil || d.err != nil {
		m.t.Fatalf("%s: no attributes", what)
	}
	return fh, *a, nfsOK
}

// create sends CREATE GUARDED with mode, uid and gid in the sattr3, as
// macOS does for open(O_CREAT).
func (m *macClient) create(dir []byte, name string, mode uint32, uid, gid *uint32) ([]byte, fattr, uint32) {
	m.t.Helper()
	var e xdrEnc
	e.opaque(dir)
	e.str(name)
	e.u32(1) // GUARDED
	e.sattr(&mode, uid, gid, false)
	return m.created(m.nfs(procCreate, e.b), "CREATE "+name)
}

func (m *macClient) mkdir(dir []byte, name string, mode uint32, uid, gid *uint32) ([]byte, fattr, uint32) {
	m.t.Helper()
	var e xdrEnc
	e.opaque(dir)
	e.str(name)
	e.sattr(&mode, uid, gid, false)
	return m.created(m.nfs(procMkdir, e.b), "MKDIR "+name)
}

func (m *macClient) setattr(fh []byte, mode *uint32, serverTime bool) uint32 {
	m.t.Helper()
	var e xdrEnc
	e.opaque(fh)
	e.sattr(mode, nil, nil, serverTime)
	e.u32(0) // no guard
	return m.nfs(procSetattr, e.b).u32()
}

func (m *macClient) write(fh []byte, off uint64, data []byte) uint32 {
	m.t.Helper()
	var e xdrEnc
	e.opaque(fh)
	e.u64(off)
	e.u32(uint32(len(data)))
	e.u32(2) // FILE_SYNC
	e.opaque(data)
	return m.nfs(procWrite, e.b).u32()
}

func (m *macClient) read(fh []byte) ([]byte, uint32) {
	m.t.Helper()
	var e xdrEnc
	e.opaque(fh)
	e.u64(0)
	e.u32(1 << 20)
	d := m.nfs(procRead, e.b)
	if st := d.u32(); st != nfsOK {
		return nil, st
	}
	d.postOp()
	d.u32() // count
	d.u32() // eof
	return d.opaque(), nfsOK
}

func (m *macClient) remove(dir []byte, name string) uint32 {
	m.t.Helper()
	var e xdrEnc
	e.opaque(dir)
	e.str(name)
	return m.nfs(procRemove, e.b).u32()
}

func (m *macClient) rename(from []byte, fromName string, to []byte, toName string) uint32 {
	m.t.Helper()
	var e xdrEnc
	e.opaque(from)
	e.str(fromName)
	e.opaque(to)
	e.str(toName)
	return m.nfs(procRename, e.b).u32()
}

// readdirplusPage sends one READDIRPLUS and returns the entries' names
// and cookies, the cookie verifier and eof.
func (m *macClient) readdirplusPage(dir []byte, cookie uint64, verf [8]byte, maxcount uint32) (names []string, cookies []uint64, newVerf [8]byte, eof bool, st uint32) {
	m.t.Helper()
	var e xdrEnc
	e.opaque(dir)
	e.u64(cookie)
	e.b = append(e.b, verf[:]...)
	e.u32(maxcount / 4) // dircount
	e.u32(maxcount)
	d := m.nfs(procReaddirplus, e.b)
	if st = d.u32(); st != nfsOK {
		return nil, nil, newVerf, false, st
	}
	d.postOp()
	copy(newVerf[:], d.b)
	d.skip(8)
	for d.u32() == 1 {
		d.u64() // fileid
		names = append(names, string(d.opaque()))
		cookies = append(cookies, d.u64())
		d.postOp()
		if d.u32() == 1 {
			d.opaque()
		}
	}
	eof = d.u32() == 1
	if d.err != nil {
		m.t.Fatalf("READDIRPLUS reply: %v", d.err)
	}
	return names, cookies, newVerf, eof, nfsOK
}

// readdirplusAll lists dir page by page as macOS does: the first call with
// cookie 0 and a zero verifier, every later call echoing the verifier of
// the previous reply. between, if not nil, runs after the first page.
func (m *macClient) readdirplusAll(dir []byte, maxcount uint32, between func()) []string {
	m.t.Helper()
	var all []string
	var cookie uint64
	var verf [8]byte
	for page := 0; ; page++ {
		names, cookies, nv, eof, st := m.readdirplusPage(dir, cookie, verf, maxcount)
		if st != nfsOK {
			m.t.Fatalf("READDIRPLUS page %d (cookie %d): status %d", page, cookie, st)
		}
		if page > 0 && nv != verf {
			m.t.Fatalf("READDIRPLUS page %d: verifier changed from %x to %x", page, verf, nv)
		}
		verf = nv
		all = append(all, names...)
		if eof {
			return all
		}
		if len(cookies) == 0 {
			m.t.Fatalf("READDIRPLUS page %d: no entries and no eof", page)
		}
		cookie = cookies[len(cookies)-1]
		if page == 0 && between != nil {
			between()
		}
	}
}

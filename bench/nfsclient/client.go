// Package nfsclient is a small handle-based NFSv3 client for benchmarks. It
// speaks RPC over a transport of its own (rpc.go: a READ's data goes
// straight from the socket into the caller's buffer) with the XDR codec of
// github.com/willscott/go-nfs-client, and exposes the raw procedures (with the stable_how of WRITE under
// the caller's control) so that a workload can keep several requests in
// flight and knows exactly which RPCs it sends.
//
// A Conn is safe for concurrent use: calls from several goroutines are
// pipelined on its TCP connection.
package nfsclient

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	gnfs "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// Stable is NFSv3's stable_how for WRITE.
type Stable uint32

// Values of stable_how (RFC 1813, 3.3.7).
const (
	Unstable Stable = 0
	DataSync Stable = 1
	FileSync Stable = 2
)

const (
	procNull        = 0
	procGetAttr     = 1
	procLookup      = 3
	procRead        = 6
	procWrite       = 7
	procCreate      = 8
	procMkdir       = 9
	procRemove      = 12
	procReadDirPlus = 17
	procFSInfo      = 19
	procCommit      = 21
)

// Target says where an export lives.
type Target struct {
	Host      string // "127.0.0.1"
	NFSPort   int
	MountPort int
	Export    string // the path given to MOUNT
}

// Conn is one TCP connection to the NFS program, plus the export's root handle.
type Conn struct {
	c    *transport
	auth rpc.Auth
	Root []byte
	// Limits from FSINFO.
	RTMax, WTMax uint32
}

// StatusError is a non-zero nfsstat3.
type StatusError struct {
	Proc   string
	Status uint32
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nfs %s: status %d (%v)", e.Proc, e.Status, gnfs.NFS3Error(e.Status))
}

// IsStatus reports whether err is an NFS status error with the given code.
func IsStatus(err error, status uint32) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == status
}

// Dial mounts t.Export and opens an NFS connection as root (AUTH_UNIX 0/0).
func Dial(t Target) (*Conn, error) {
	auth := rpc.NewAuthUnix("nfsbench", 0, 0).Auth()
	mc, err := dialTransport(net.JoinHostPort(t.Host, strconv.Itoa(t.MountPort)))
	if err != nil {
		return nil, fmt.Errorf("dial mount: %w", err)
	}
	defer mc.Close()
	type mntArgs struct {
		rpc.Header
		Dirpath string
	}
	body, _, err := mc.call(&mntArgs{Header: header(gnfs.MountProg, gnfs.MountVers, gnfs.MountProc3MNT, auth), Dirpath: t.Export}, nil)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", t.Export, err)
	}
	r := bytes.NewReader(body)
	st, err := xdr.ReadUint32(r)
	if err != nil {
		return nil, err
	}
	if st != 0 {
		return nil, fmt.Errorf("mount %s: mountstat3 %d", t.Export, st)
	}
	root, err := xdr.ReadOpaque(r)
	if err != nil {
		return nil, err
	}
	return DialHandle(t, root)
}

// DialHandle opens another NFS connection for an already mounted root handle.
func DialHandle(t Target, root []byte) (*Conn, error) {
	c, err := dialTransport(net.JoinHostPort(t.Host, strconv.Itoa(t.NFSPort)))
	if err != nil {
		return nil, fmt.Errorf("dial nfs: %w", err)
	}
	conn := &Conn{c: c, auth: rpc.NewAuthUnix("nfsbench", 0, 0).Auth(), Root: root}
	if err := conn.fsinfo(); err != nil {
		c.Close()
		return nil, err
	}
	return conn, nil
}

// Close closes the connection.
func (c *Conn) Close() { c.c.Close() }

func header(prog, vers, proc uint32, auth rpc.Auth) rpc.Header {
	return rpc.Header{Rpcvers: 2, Prog: prog, Vers: vers, Proc: proc, Cred: auth, Verf: rpc.AuthNull}
}

func (c *Conn) hdr(proc uint32) rpc.Header { return header(gnfs.Nfs3Prog, gnfs.Nfs3Vers, proc, c.auth) }

var procNames = map[uint32]string{procGetAttr: "GETATTR", procLookup: "LOOKUP", procRead: "READ",
	procWrite: "WRITE", procCreate: "CREATE", procMkdir: "MKDIR", procRemove: "REMOVE",
	procReadDirPlus: "READDIRPLUS", procFSInfo: "FSINFO", procCommit: "COMMIT"}

// call sends args (whose Header names the procedure) and returns the reply
// positioned after a zero nfsstat3.
func (c *Conn) call(proc uint32, args any) (io.ReadSeeker, error) {
	return c.callRead(proc, args, nil, nil)
}

// callRead is call for a READ, whose data goes into dst (n: how much).
func (c *Conn) callRead(proc uint32, args any, dst []byte, n *int) (io.ReadSeeker, error) {
	body, got, err := c.c.call(args, dst)
	if err != nil {
		return nil, fmt.Errorf("nfs %s: %w", procNames[proc], err)
	}
	if n != nil {
		*n = got
	}
	r := bytes.NewReader(body)
	st, err := xdr.ReadUint32(r)
	if err != nil {
		return nil, err
	}
	if st != 0 {
		return nil, &StatusError{Proc: procNames[proc], Status: st}
	}
	return r, nil
}

func (c *Conn) fsinfo() error {
	type args struct {
		rpc.Header
		FH []byte
	}
	r, err := c.call(procFSInfo, &args{c.hdr(procFSInfo), c.Root})
	if err != nil {
		return err
	}
	var res gnfs.FSInfo
	if err := xdr.Read(r, &res); err != nil {
		return err
	}
	c.RTMax, c.WTMax = res.RTMax, res.WTMax
	return nil
}

// Attr is the subset of fattr3 the benchmarks look at.
type Attr = gnfs.Fattr

// Lookup returns the handle and attributes of dir/name.
func (c *Conn) Lookup(dir []byte, name string) ([]byte, Attr, error) {
	type args struct {
		rpc.Header
		What gnfs.Diropargs3
	}
	r, err := c.call(procLookup, &args{c.hdr(procLookup), gnfs.Diropargs3{FH: dir, Filename: name}})
	if err != nil {
		return nil, Attr{}, err
	}
	var res struct {
		FH      []byte
		Attr    gnfs.PostOpAttr
		DirAttr gnfs.PostOpAttr
	}
	if err := xdr.Read(r, &res); err != nil {
		return nil, Attr{}, err
	}
	return res.FH, res.Attr.Attr, nil
}

// GetAttr returns the attributes of fh.
func (c *Conn) GetAttr(fh []byte) (Attr, error) {
	type args struct {
		rpc.Header
		FH []byte
	}
	r, err := c.call(procGetAttr, &args{c.hdr(procGetAttr), fh})
	if err != nil {
		return Attr{}, err
	}
	var a Attr
	err = xdr.Read(r, &a)
	return a, err
}

// Create creates dir/name (UNCHECKED, mode) and returns its handle.
func (c *Conn) Create(dir []byte, name string, mode uint32) ([]byte, error) {
	type how struct {
		Mode uint32
		Attr gnfs.Sattr3
	}
	type args struct {
		rpc.Header
		Where gnfs.Diropargs3
		How   how
	}
	a := &args{c.hdr(procCreate), gnfs.Diropargs3{FH: dir, Filename: name},
		how{Attr: gnfs.Sattr3{Mode: gnfs.SetMode{SetIt: true, Mode: mode}}}}
	r, err := c.call(procCreate, a)
	if err != nil {
		return nil, err
	}
	var res struct {
		FH gnfs.PostOpFH3
	}
	if err := xdr.Read(r, &res); err != nil {
		return nil, err
	}
	if !res.FH.IsSet {
		fh, _, err := c.Lookup(dir, name)
		return fh, err
	}
	return res.FH.FH, nil
}

// Mkdir creates directory dir/name and returns its handle.
func (c *Conn) Mkdir(dir []byte, name string, mode uint32) ([]byte, error) {
	type args struct {
		rpc.Header
		Where gnfs.Diropargs3
		Attr  gnfs.Sattr3
	}
	r, err := c.call(procMkdir, &args{c.hdr(procMkdir), gnfs.Diropargs3{FH: dir, Filename: name},
		gnfs.Sattr3{Mode: gnfs.SetMode{SetIt: true, Mode: mode}}})
	if err != nil {
		return nil, err
	}
	var res struct {
		FH gnfs.PostOpFH3
	}
	if err := xdr.Read(r, &res); err != nil {
		return nil, err
	}
	if !res.FH.IsSet {
		fh, _, err := c.Lookup(dir, name)
		return fh, err
	}
	return res.FH.FH, nil
}

// Write writes p at off with the given stability and returns the count the
// server took.
func (c *Conn) Write(fh []byte, off uint64, p []byte, how Stable) (uint32, error) {
	type args struct {
		rpc.Header
		FH       []byte
		Offset   uint64
		Count    uint32
		How      uint32
		Contents []byte
	}
	r, err := c.call(procWrite, &args{c.hdr(procWrite), fh, off, uint32(len(p)), uint32(how), p})
	if err != nil {
		return 0, err
	}
	var res struct {
		Wcc   gnfs.WccData
		Count uint32
		How   uint32
		Verf  uint64
	}
	if err := xdr.Read(r, &res); err != nil {
		return 0, err
	}
	return res.Count, nil
}

// WriteFull writes all of p at off, looping over short writes.
func (c *Conn) WriteFull(fh []byte, off uint64, p []byte, how Stable) error {
	for len(p) > 0 {
		n, err := c.Write(fh, off, p, how)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("nfs WRITE: server wrote 0 bytes at %d", off)
		}
		p, off = p[n:], off+uint64(n)
	}
	return nil
}

// Read reads up to len(p) bytes at off into p.
func (c *Conn) Read(fh []byte, off uint64, p []byte) (n int, eof bool, err error) {
	type args struct {
		rpc.Header
		FH     []byte
		Offset uint64
		Count  uint32
	}
	r, err := c.callRead(procRead, &args{c.hdr(procRead), fh, off, uint32(len(p))}, p, &n)
	if err != nil {
		return 0, false, err
	}
	var res struct {
		Attr  gnfs.PostOpAttr
		Count uint32
		EOF   bool
	}
	if err := xdr.Read(r, &res); err != nil {
		return 0, false, err
	}
	return n, res.EOF, nil
}

// ReadFull fills p from off, looping over short reads; it fails at EOF.
func (c *Conn) ReadFull(fh []byte, off uint64, p []byte) error {
	for len(p) > 0 {
		n, eof, err := c.Read(fh, off, p)
		if err != nil {
			return err
		}
		if n == 0 && eof {
			return fmt.Errorf("nfs READ: unexpected EOF at %d", off)
		}
		p, off = p[n:], off+uint64(n)
	}
	return nil
}

// Commit commits the whole file.
func (c *Conn) Commit(fh []byte) error {
	type args struct {
		rpc.Header
		FH     []byte
		Offset uint64
		Count  uint32
	}
	_, err := c.call(procCommit, &args{c.hdr(procCommit), fh, 0, 0})
	return err
}

// Remove removes dir/name.
func (c *Conn) Remove(dir []byte, name string) error {
	type args struct {
		rpc.Header
		What gnfs.Diropargs3
	}
	_, err := c.call(procRemove, &args{c.hdr(procRemove), gnfs.Diropargs3{FH: dir, Filename: name}})
	return err
}

// Entry is one READDIRPLUS entry.
type Entry struct {
	Name   string
	Fileid uint64
	FH     []byte
	Attr   Attr
}

// ReadDirPlus lists dir completely, following cookies, with maxcount bytes
// per reply. It returns the entries (without "." and "..") and the number of
// RPCs it took.
func (c *Conn) ReadDirPlus(dir []byte, maxcount uint32) ([]Entry, int, error) {
	type args struct {
		rpc.Header
		FH         []byte
		Cookie     uint64
		CookieVerf uint64
		DirCount   uint32
		MaxCount   uint32
	}
	type item struct {
		IsSet bool           `xdr:"union"`
		Entry gnfs.EntryPlus `xdr:"unioncase=1"`
	}
	var out []Entry
	cookie, verf, calls := uint64(0), uint64(0), 0
	for {
		calls++
		r, err := c.call(procReadDirPlus, &args{c.hdr(procReadDirPlus), dir, cookie, verf, maxcount / 2, maxcount})
		if err != nil {
			return out, calls, err
		}
		var head struct {
			DirAttr gnfs.PostOpAttr
			Verf    uint64
		}
		if err := xdr.Read(r, &head); err != nil {
			return out, calls, err
		}
		verf = head.Verf
		n := 0
		for {
			var it item
			if err := xdr.Read(r, &it); err != nil {
				return out, calls, err
			}
			if !it.IsSet {
				break
			}
			n++
			cookie = it.Entry.Cookie
			if it.Entry.FileName == "." || it.Entry.FileName == ".." {
				continue
			}
			out = append(out, Entry{Name: it.Entry.FileName, Fileid: it.Entry.FileId, FH: it.Entry.Handle.FH, Attr: it.Entry.Attr.Attr})
		}
		eof, err := xdr.ReadUint32(r)
		if err != nil {
			return out, calls, err
		}
		if eof != 0 {
			return out, calls, nil
		}
		if n == 0 {
			return out, calls, errors.New("nfs READDIRPLUS: no entries and no EOF")
		}
	}
}

package testbin

import (
	nfs "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// Raw NFSv3 calls by file handle over go-nfs-client's RPC transport, for
// the suites that check what a server acknowledged without a mount.

// FileSync is WRITE's stable_how FILE_SYNC.
const FileSync = 2

func header(proc uint32, auth rpc.Auth) rpc.Header {
	return rpc.Header{Rpcvers: 2, Prog: nfs.Nfs3Prog, Vers: nfs.Nfs3Vers, Proc: proc, Cred: auth, Verf: rpc.AuthNull}
}

// WriteFH writes data at off of the file fh with one WRITE of stability
// how and returns the NFS status.
func WriteFH(c *rpc.Client, auth rpc.Auth, fh []byte, off uint64, data []byte, how uint32) (uint32, error) {
	type writeArgs struct {
		rpc.Header
		FH       []byte
		Offset   uint64
		Count    uint32
		How      uint32
		Contents []byte
	}
	res, err := c.Call(&writeArgs{header(nfs.NFSProc3Write, auth), fh, off, uint32(len(data)), how, data})
	if err != nil {
		return 0, err
	}
	return xdr.ReadUint32(res)
}

// ReadFH reads the whole file fh with READs of 1 MiB; a status other than
// NFS3_OK is returned as go-nfs-client's error for it.
func ReadFH(c *rpc.Client, auth rpc.Auth, fh []byte) ([]byte, error) {
	type readArgs struct {
		rpc.Header
		FH     []byte
		Offset uint64
		Count  uint32
	}
	type readRes struct {
		Attr  nfs.PostOpAttr
		Count uint32
		EOF   uint32
	}
	var out []byte
	for {
		res, err := c.Call(&readArgs{header(nfs.NFSProc3Read, auth), fh, uint64(len(out)), 1 << 20})
		if err != nil {
			return nil, err
		}
		stat, err := xdr.ReadUint32(res)
		if err != nil {
			return nil, err
		}
		if err := nfs.NFS3Error(stat); err != nil {
			return nil, err
		}
		var rr readRes
		if err := xdr.Read(res, &rr); err != nil {
			return nil, err
		}
		data, err := xdr.ReadOpaque(res)
		if err != nil {
			return nil, err
		}
		out = append(out, data...)
		if rr.EOF != 0 || len(data) == 0 {
			return out, nil
		}
	}
}

// FSStat is the FSSTAT reply's figures.
type FSStat struct {
	Tbytes, Fbytes, Abytes, Tfiles, Ffiles, Afiles uint64
}

// FSStatFH sends FSSTAT for the filesystem of handle fh.
func FSStatFH(c *rpc.Client, auth rpc.Auth, fh []byte) (FSStat, error) {
	type args struct {
		rpc.Header
		FH []byte
	}
	const procFSStat = 18 // FSSTAT, which go-nfs-client does not name
	res, err := c.Call(&args{header(procFSStat, auth), fh})
	if err != nil {
		return FSStat{}, err
	}
	stat, err := xdr.ReadUint32(res)
	if err != nil {
		return FSStat{}, err
	}
	if err := nfs.NFS3Error(stat); err != nil {
		return FSStat{}, err
	}
	var attr nfs.PostOpAttr
	if err := xdr.Read(res, &attr); err != nil {
		return FSStat{}, err
	}
	var fs FSStat
	err = xdr.Read(res, &fs)
	return fs, err
}

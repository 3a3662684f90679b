package nfsserver

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// node is a resolved file handle: the branch view and the inode's current
// attributes. For the synthetic root of export "/", fs is nil.
type node struct {
	h    fileHandle
	fs   *cowfs.View
	info branches.Info
	attr cowfs.Attr
}

func (n *node) isSyntheticRoot() bool { return n.fs == nil }

func (n *node) isDir() bool { return n.attr.Type == cowfs.TypeDir }

// resolve turns a wire handle into a node. Errors: errBadHandle for a handle
// we did not issue; branches.ErrStale/ErrNotFound (NFS3ERR_STALE) when its
// branch is gone; ESTALE when the inode was deleted or replaced (generation
// changed).
func (r *request) resolve(raw []byte) (*node, error) {
	h, err := r.s.decodeHandle(raw)
	if err != nil {
		return nil, err
	}
	if h.isSyntheticRoot() {
		return r.s.rootNode(r.ctx)
	}
	fs, info, err := r.handleView(h)
	if err != nil {
		return nil, err
	}
	a, err := fs.GetAttr(h.ino)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			err = syscall.ESTALE
		}
		return nil, err
	}
	if a.Gen != h.gen {
		return nil, syscall.ESTALE
	}
	return &node{h: h, fs: fs, info: info, attr: a}, nil
}

// handleView returns the view and branch of a decoded handle that is not
// the synthetic root's, without reading the inode (resolve does, LOOKUP
// reads it with the name).
func (r *request) handleView(h fileHandle) (*cowfs.View, branches.Info, error) {
	fs, info, err := r.s.opts.Branches.ViewByID(h.branch)
	if err != nil {
		return nil, info, err
	}
	if r.conn != nil && !h.viaRoot {
		r.conn.touch(h.branch)
	}
	return fs, info, nil
}

// nodeOf wraps attributes of an inode in the same branch as n.
func (n *node) nodeOf(a cowfs.Attr) *node {
	return &node{h: n.h.child(a.Ino, a.Gen), fs: n.fs, info: n.info, attr: a}
}

// rootState tracks the synthetic root directory's mtime: it changes when
// the set of live branches does, so clients revalidate their listing.
type rootState struct {
	mu    sync.Mutex // protects the following
	sig   uint64
	mtime time.Time
}

// liveBranches lists the live branches, sorted by id.
func (s *Server) liveBranches(ctx context.Context) ([]branches.Info, error) {
	all := s.opts.Branches.Live()
	live := all[:0:0]
	for _, b := range all {
		if b.State == branches.StateLive && b.ID != rootBranch {
			live = append(live, b)
		}
	}
	slices.SortFunc(live, func(a, b branches.Info) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return live, nil
}

// rootNode builds the synthetic root directory of export "/": mode 0755,
// owned by root, one subdirectory per live branch.
func (s *Server) rootNode(ctx context.Context) (*node, error) {
	live, err := s.liveBranches(ctx)
	if err != nil {
		return nil, err
	}
	hs := fnv.New64a()
	var b [8]byte
	for _, x := range live {
		for i := range b {
			b[i] = byte(uint64(x.ID) >> (8 * i))
		}
		hs.Write(b[:])
		hs.Write([]byte(x.Name))
	}
	sig := hs.Sum64()
	s.root.mu.Lock()
	if sig != s.root.sig {
		if s.root.sig != 0 {
			s.root.mtime = time.Now()
		}
		s.root.sig = sig
	}
	mtime := s.root.mtime
	s.root.mu.Unlock()
	return &node{
		h: rootHandle,
		attr: cowfs.Attr{
			Ino:   cowfs.RootIno,
			Type:  cowfs.TypeDir,
			Mode:  0o755,
			Nlink: uint32(2 + len(live)),
			Size:  4096,
			Used:  4096,
			Atime: mtime, Mtime: mtime, Ctime: mtime,
			Parent: cowfs.RootIno,
		},
	}, nil
}

// branchRoot returns the root directory of branch name as reached from the
// synthetic root. A missing or dead branch is ENOENT.
func (s *Server) branchRoot(name string) (*node, error) {
	fs, info, err := s.opts.Branches.View(name)
	if err != nil {
		return nil, syscall.ENOENT
	}
	a, err := fs.GetAttr(cowfs.RootIno)
	if err != nil {
		return nil, err
	}
	return &node{h: fileHandle{viaRoot: true, branch: info.ID, ino: cowfs.RootIno, gen: a.Gen}, fs: fs, info: info, attr: a}, nil
}

// parentOf returns the parent directory of directory n ("..").
func (r *request) parentOf(n *node) (*node, error) {
	if n.isSyntheticRoot() {
		return n, nil
	}
	if n.attr.Ino == cowfs.RootIno {
		if n.h.viaRoot {
			return r.s.rootNode(r.ctx)
		}
		return n, nil
	}
	a, err := n.fs.GetAttr(n.attr.Parent)
	if err != nil {
		return nil, err
	}
	return n.nodeOf(a), nil
}

// maxFileSize is the largest file size n's view accepts (the default for
// the synthetic root, which has no view).
func (n *node) maxFileSize() uint64 {
	if n.fs == nil {
		return cowfs.DefaultMaxFileSize
	}
	return n.fs.MaxFileSize()
}

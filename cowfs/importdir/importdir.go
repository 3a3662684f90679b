// Package importdir copies a directory tree of the local filesystem into a
// cowfs view: contents, modes (setuid, setgid and sticky included),
// owners, symlinks, hard links, FIFOs, sockets and device nodes, and
// access and modification times.
//
// It uses the inode API of cowfs, so inode numbers of hard links are
// shared as in the source. File contents go in as content-defined chunks
// (cowfs.View.WriteChunked), as GC would rechunk them: a fresh store has
// nothing left to rechunk, and data shifted against an imported file
// shares its chunks at once. Directory times are set after their contents,
// so they end up as in the source. Import is not atomic by itself: import
// into a fresh branch and commit it for all-or-nothing (the CLI does).
package importdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/branchnfs/branchnfs/cowfs"
	"golang.org/x/sys/unix"
)

// Progress counts what an import has done so far.
type Progress struct {
	Dirs      int64  `json:"dirs"`
	Files     int64  `json:"files"`
	Symlinks  int64  `json:"symlinks"`
	HardLinks int64  `json:"hard_links"` // extra links to files already imported
	Special   int64  `json:"special"`    // FIFOs, sockets, devices
	Bytes     int64  `json:"bytes"`      // file data copied
	Path      string `json:"path"`       // the entry just imported, relative to the source
}

// Entries is the number of entries imported.
func (p Progress) Entries() int64 { return p.Dirs + p.Files + p.Symlinks + p.HardLinks + p.Special }

// Options configures Import. The zero value is valid.
type Options struct {
	// Progress, when set, is called after every entry, from the importing
	// goroutine. It must be fast; throttle display in the callback.
	Progress func(Progress)
}

// linkKey identifies a source inode for hard link detection.
type linkKey struct{ dev, ino uint64 }

type importer struct {
	ctx   context.Context
	fs    *cowfs.View
	opts  Options
	links map[linkKey]cowfs.InodeID
	p     Progress
}

// Import copies the tree at src into directory dst of fs. Names that exist
// in dst make it fail with EEXIST. The attributes (mode, owner, times) of
// src itself are applied to dst. It returns what was imported, also on
// error.
func Import(ctx context.Context, fs *cowfs.View, dst cowfs.InodeID, src string, opts Options) (Progress, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return Progress{}, fmt.Errorf("importdir: %w", err)
	}
	if !fi.IsDir() {
		return Progress{}, fmt.Errorf("importdir: %s is not a directory", src)
	}
	im := &importer{ctx: ctx, fs: fs, opts: opts, links: make(map[linkKey]cowfs.InodeID)}
	if err := im.dir(src, "", dst); err != nil {
		return im.p, err
	}
	if err := im.finishDir(dst, fi, ""); err != nil {
		return im.p, err
	}
	return im.p, nil
}

func (im *importer) progress(rel string) {
	if im.opts.Progress != nil {
		im.p.Path = rel
		im.opts.Progress(im.p)
	}
}

func wrap(rel string, err error) error {
	if rel == "" {
		rel = "."
	}
	return fmt.Errorf("importdir: %s: %w", rel, err)
}

// dir imports the entries of the source directory abs into dst.
func (im *importer) dir(abs, rel string, dst cowfs.InodeID) error {
	ents, err := os.ReadDir(abs)
	if err != nil {
		return wrap(rel, err)
	}
	for _, e := range ents {
		if err := im.ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		cabs, crel := filepath.Join(abs, name), filepath.ToSlash(filepath.Join(rel, name))
		fi, err := os.Lstat(cabs)
		if err != nil {
			return wrap(crel, err)
		}
		if err := im.entry(cabs, crel, name, fi, dst); err != nil {
			return err
		}
	}
	return nil
}

func (im *importer) entry(abs, rel, name string, fi os.FileInfo, dst cowfs.InodeID) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return wrap(rel, errors.New("no stat information"))
	}
	na := cowfs.NewAttr{
		Mode:  uint32(st.Mode) & cowfs.ModePerm,
		UID:   st.Uid,
		GID:   st.Gid,
		Atime: atime(st),
		Mtime: fi.ModTime(),
	}
	key := linkKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	if !fi.IsDir() && st.Nlink > 1 {
		if ino, seen := im.links[key]; seen {
			if _, err := im.fs.Link(ino, dst, name); err != nil {
				return wrap(rel, err)
			}
			im.p.HardLinks++
			im.progress(rel)
			return nil
		}
	}
	var a cowfs.Attr
	var err error
	switch m := fi.Mode(); {
	case m.IsDir():
		if a, err = im.fs.Mkdir(dst, name, na); err != nil {
			return wrap(rel, err)
		}
		if err := im.dir(abs, rel, a.Ino); err != nil {
			return err
		}
		if err := im.finishDir(a.Ino, fi, rel); err != nil {
			return err
		}
		im.p.Dirs++
	case m.IsRegular():
		if a, err = im.file(abs, rel, name, fi, na, dst); err != nil {
			return err
		}
		im.p.Files++
	case m&os.ModeSymlink != 0:
		target, err := os.Readlink(abs)
		if err != nil {
			return wrap(rel, err)
		}
		if a, err = im.fs.Symlink(dst, name, target, na); err != nil {
			return wrap(rel, err)
		}
		im.p.Symlinks++
	default:
		t := cowfs.TypeFIFO
		switch {
		case m&os.ModeSocket != 0:
			t = cowfs.TypeSocket
		case m&os.ModeCharDevice != 0:
			t = cowfs.TypeChar
		case m&os.ModeDevice != 0:
			t = cowfs.TypeBlock
		}
		if t == cowfs.TypeChar || t == cowfs.TypeBlock {
			rdev := uint64(st.Rdev)
			na.Rdev = uint64(unix.Major(rdev))<<32 | uint64(unix.Minor(rdev))
		}
		if a, err = im.fs.Mknod(dst, name, t, na); err != nil {
			return wrap(rel, err)
		}
		im.p.Special++
	}
	if !fi.IsDir() && st.Nlink > 1 {
		im.links[key] = a.Ino
	}
	im.progress(rel)
	return nil
}

// file creates a regular file and copies its data.
func (im *importer) file(abs, rel, name string, fi os.FileInfo, na cowfs.NewAttr, dst cowfs.InodeID) (cowfs.Attr, error) {
	a, err := im.fs.Create(dst, name, cowfs.CreateGuarded, na, 0)
	if err != nil {
		return a, wrap(rel, err)
	}
	if fi.Size() == 0 {
		return a, nil
	}
	f, err := os.Open(abs)
	if err != nil {
		return a, wrap(rel, err)
	}
	defer f.Close()
	_, n, err := im.fs.WriteChunked(a.Ino, ctxReader{im.ctx, f})
	im.p.Bytes += n
	if err != nil {
		if cerr := im.ctx.Err(); cerr != nil {
			return a, cerr
		}
		return a, wrap(rel, err)
	}
	// Writing moved mtime; put the source's times back.
	at, mt := na.Atime, na.Mtime
	if a, err = im.fs.SetAttr(a.Ino, cowfs.SetAttr{Atime: &at, Mtime: &mt}); err != nil {
		return a, wrap(rel, err)
	}
	return a, nil
}

// finishDir sets a directory's mode, owner and times once its entries are
// in (adding entries moved its mtime).
func (im *importer) finishDir(ino cowfs.InodeID, fi os.FileInfo, rel string) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return wrap(rel, errors.New("no stat information"))
	}
	mode := uint32(st.Mode) & cowfs.ModePerm
	uid, gid := st.Uid, st.Gid
	at, mt := atime(st), fi.ModTime()
	if _, err := im.fs.SetAttr(ino, cowfs.SetAttr{Mode: &mode, UID: &uid, GID: &gid, Atime: &at, Mtime: &mt}); err != nil {
		return wrap(rel, err)
	}
	return nil
}

// ctxReader stops reading a source file once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

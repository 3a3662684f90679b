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
//
// The source is read through descriptors, never by path (source.go): what
// changes under a running import makes it fail with ErrChanged, and
// nothing outside the source is ever read.
package importdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/zeebo/blake3"
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
	// Of an Update: the source entries compared with the cache so far,
	// and those read and hashed because their stat differed.
	Scanned int64 `json:"scanned,omitempty"`
	Hashed  int64 `json:"hashed,omitempty"`
}

// Entries is the number of entries imported.
func (p Progress) Entries() int64 { return p.Dirs + p.Files + p.Symlinks + p.HardLinks + p.Special }

// Options configures Import. The zero value is valid.
type Options struct {
	// Progress, when set, is called after every entry, from the importing
	// goroutine. It must be fast; throttle display in the callback.
	Progress func(Progress)
	// Cache, when set, receives the stat of every entry imported (see
	// Update); the caller saves it.
	Cache *Cache
}

// linkKey identifies a source inode for hard link detection.
type linkKey struct{ dev, ino uint64 }

type importer struct {
	ctx   context.Context
	fs    *cowfs.View
	opts  Options
	links map[linkKey]cowfs.InodeID
	// linkHash holds the content hash of hard-linked files (Cache).
	linkHash map[linkKey][32]byte
	p        Progress
	start    int64 // ns, when the walk began (racy entries: see record)
	// added, when set, is told of every entry created (Update).
	added func(rel string)
	// root is the source, absolute, symlinks resolved (for `.git` files).
	root string
	// skip, when set, leaves out the entries it accepts (gitdir.go).
	skip func(rel string) bool
	// merge: entries that exist in the view are replaced, directories
	// merged (gitdir.go).
	merge bool
}

// racyWindow: an entry whose mtime or ctime is this close to the start of
// the walk, or later, may change again without its stat showing it
// (timestamps are coarse): the cache marks it racy.
var racyWindow = 50 * time.Millisecond

// record puts the entry's stat in the cache, if there is one.
func (im *importer) record(rel string, st *unix.Stat_t, h [32]byte) {
	if im.opts.Cache == nil {
		return
	}
	s := makeStat(st, h)
	s.Racy = max(s.Mtime, s.Ctime) >= im.start-int64(racyWindow)
	im.opts.Cache.put(rel, s)
}

// Import copies the tree at src into directory dst of fs. Names that exist
// in dst make it fail with EEXIST. The attributes (mode, owner, times) of
// src itself are applied to dst. It returns what was imported, also on
// error. It reads only what it listed inside src: an entry that changes
// type or identity while it runs fails the import with ErrChanged.
func Import(ctx context.Context, fs *cowfs.View, dst cowfs.InodeID, src string, opts Options) (Progress, error) {
	root, st, err := openRoot(src)
	if err != nil {
		return Progress{}, err
	}
	defer root.Close()
	im := newImporter(ctx, fs, opts)
	im.root = resolvedRoot(src)
	if err := im.dir(root, "", dst); err != nil {
		return im.p, err
	}
	if err := im.finishDir(dst, &st, ""); err != nil {
		return im.p, err
	}
	return im.p, nil
}

// resolvedRoot is src absolute with its symlinks resolved, or "" if that
// fails (then `.git` files are imported as they are).
func resolvedRoot(src string) string {
	abs, err := filepath.Abs(src)
	if err != nil {
		return ""
	}
	r, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return ""
	}
	return r
}

func newImporter(ctx context.Context, fs *cowfs.View, opts Options) *importer {
	return &importer{ctx: ctx, fs: fs, opts: opts, links: make(map[linkKey]cowfs.InodeID), linkHash: make(map[linkKey][32]byte), start: time.Now().UnixNano()}
}

func (im *importer) progress(rel string) {
	if im.added != nil {
		im.added(rel)
	}
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

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// dir imports the entries of the source directory d into dst.
func (im *importer) dir(d *srcDir, rel string, dst cowfs.InodeID) error {
	names, err := d.names()
	if err != nil {
		return wrap(rel, err)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := im.ctx.Err(); err != nil {
			return err
		}
		crel := join(rel, name)
		if im.skip != nil && im.skip(crel) {
			continue
		}
		st, err := d.lstat(name)
		if err != nil {
			return wrap(crel, err)
		}
		if gd, err := im.outsideGitDir(d, crel, name, &st); err != nil {
			return err
		} else if gd != "" {
			if crel != ".git" || im.skip != nil {
				return gitOutside(crel, gd, im.root)
			}
			if err := im.materializeGit(crel, &st, dst, gd); err != nil {
				return err
			}
			continue
		}
		if im.merge {
			if err := im.replace(dst, name, &st, crel); err != nil {
				return err
			}
		}
		if err := im.entry(d, crel, name, &st, dst); err != nil {
			return err
		}
	}
	return nil
}

// newAttr is what a new inode gets from the source's stat.
func newAttr(st *unix.Stat_t) cowfs.NewAttr {
	return cowfs.NewAttr{
		Mode:  uint32(st.Mode) & cowfs.ModePerm,
		UID:   st.Uid,
		GID:   st.Gid,
		Atime: tsTime(st.Atim),
		Mtime: tsTime(st.Mtim),
	}
}

func (im *importer) entry(d *srcDir, rel, name string, st *unix.Stat_t, dst cowfs.InodeID) error {
	na := newAttr(st)
	t := fileType(st)
	key := linkKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	if t != unix.S_IFDIR && st.Nlink > 1 {
		if ino, seen := im.links[key]; seen {
			if _, err := im.fs.Link(ino, dst, name); err != nil {
				return wrap(rel, err)
			}
			im.p.HardLinks++
			im.record(rel, st, im.linkHash[key])
			im.progress(rel)
			return nil
		}
	}
	var a cowfs.Attr
	var h [32]byte
	var err error
	if beforeOpen != nil && (t == unix.S_IFDIR || t == unix.S_IFREG || t == unix.S_IFLNK) {
		beforeOpen(rel)
	}
	switch t {
	case unix.S_IFDIR:
		sub, err := d.openDir(name, rel, st)
		if err != nil {
			return wrap(rel, err)
		}
		defer sub.Close()
		if a, err = im.fs.Mkdir(dst, name, na); errors.Is(err, unix.EEXIST) && im.merge {
			// Merging: replace left a directory here to merge into.
			a, err = im.fs.Lookup(dst, name)
		}
		if err != nil {
			return wrap(rel, err)
		}
		if err := im.dir(sub, rel, a.Ino); err != nil {
			return err
		}
		if err := im.finishDir(a.Ino, st, rel); err != nil {
			return err
		}
		im.p.Dirs++
	case unix.S_IFREG:
		if a, h, err = im.file(d, rel, name, st, na, dst); err != nil {
			return err
		}
		im.p.Files++
	case unix.S_IFLNK:
		target, err := d.readlink(name, st)
		if err != nil {
			return wrap(rel, err)
		}
		if a, err = im.fs.Symlink(dst, name, target, na); err != nil {
			return wrap(rel, err)
		}
		h = blake3.Sum256([]byte(target))
		im.p.Symlinks++
	default:
		ft := cowfs.TypeFIFO
		switch t {
		case unix.S_IFSOCK:
			ft = cowfs.TypeSocket
		case unix.S_IFCHR:
			ft = cowfs.TypeChar
		case unix.S_IFBLK:
			ft = cowfs.TypeBlock
		}
		if ft == cowfs.TypeChar || ft == cowfs.TypeBlock {
			rdev := uint64(st.Rdev)
			na.Rdev = uint64(unix.Major(rdev))<<32 | uint64(unix.Minor(rdev))
		}
		if a, err = im.fs.Mknod(dst, name, ft, na); err != nil {
			return wrap(rel, err)
		}
		im.p.Special++
	}
	if t != unix.S_IFDIR && st.Nlink > 1 {
		im.links[key] = a.Ino
		if im.opts.Cache != nil {
			im.linkHash[key] = h
		}
	}
	im.record(rel, st, h)
	im.progress(rel)
	return nil
}

// file creates a regular file and copies its data.
func (im *importer) file(d *srcDir, rel, name string, st *unix.Stat_t, na cowfs.NewAttr, dst cowfs.InodeID) (cowfs.Attr, [32]byte, error) {
	var h [32]byte
	// Opened first, so that nothing is created for an entry that changed.
	var f *os.File
	if st.Size > 0 {
		var err error
		if f, err = d.open(name, st); err != nil {
			return cowfs.Attr{}, h, wrap(rel, err)
		}
		defer f.Close()
	}
	a, err := im.fs.Create(dst, name, cowfs.CreateGuarded, na, 0)
	if err != nil {
		return a, h, wrap(rel, err)
	}
	if f == nil {
		return a, blake3.Sum256(nil), nil
	}
	var r io.Reader = &sizedReader{f: f, st: st, left: st.Size}
	var hasher *blake3.Hasher
	if im.opts.Cache != nil {
		hasher = blake3.New()
		r = io.TeeReader(r, hasher)
	}
	_, n, err := im.fs.WriteChunked(a.Ino, ctxReader{im.ctx, r})
	im.p.Bytes += n
	if err != nil {
		if cerr := im.ctx.Err(); cerr != nil {
			return a, h, cerr
		}
		return a, h, wrap(rel, err)
	}
	if hasher != nil {
		copy(h[:], hasher.Sum(nil))
	}
	// Writing moved mtime; put the source's times back.
	at, mt := na.Atime, na.Mtime
	if a, err = im.fs.SetAttr(a.Ino, cowfs.SetAttr{Atime: &at, Mtime: &mt}); err != nil {
		return a, h, wrap(rel, err)
	}
	return a, h, nil
}

// replace makes room for source entry name (stat st) in dst when merging:
// whatever is there goes, unless both are directories.
func (im *importer) replace(dst cowfs.InodeID, name string, st *unix.Stat_t, rel string) error {
	a, err := im.fs.Lookup(dst, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return wrap(rel, err)
	}
	if a.Type == cowfs.TypeDir && fileType(st) == unix.S_IFDIR {
		return nil
	}
	if a.Type == cowfs.TypeDir {
		return wrap(rel, fmt.Errorf("a directory in the common git directory is a file in the worktree's: %w", unix.EEXIST))
	}
	if err := im.fs.Unlink(dst, name); err != nil {
		return wrap(rel, err)
	}
	return nil
}

// finishDir sets a directory's mode, owner and times once its entries are
// in (adding entries moved its mtime).
func (im *importer) finishDir(ino cowfs.InodeID, st *unix.Stat_t, rel string) error {
	mode := uint32(st.Mode) & cowfs.ModePerm
	uid, gid := st.Uid, st.Gid
	at, mt := tsTime(st.Atim), tsTime(st.Mtim)
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

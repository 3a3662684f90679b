package importdir

import (
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"syscall"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"
)

// Change kinds of Changes.Paths.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
)

// PathChange is one path Update changed in the view.
type PathChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // Added, Modified or Deleted
}

// Changes is what Update did. JSON field names are part of the CLI's
// --json output.
type Changes struct {
	Added     int64 `json:"added"`
	Modified  int64 `json:"modified"`
	Deleted   int64 `json:"deleted"`
	Unchanged int64 `json:"unchanged"` // entries whose stat matched the cache
	Hashed    int64 `json:"hashed"`    // entries read because their stat did not
	Bytes     int64 `json:"bytes"`     // file data written
	// Paths lists every change, in walk order. Under an added or deleted
	// directory, each entry is listed.
	Paths []PathChange `json:"paths"`
}

// Update brings what changed in the source tree src since its entries were
// recorded in cache into directory dst of fs, which holds an earlier import
// of src (possibly changed since, in the store), and records the new stats
// in cache (the caller saves it). It compares each entry's stat (type,
// mode, owner, size, mtime, ctime, device, inode) with the cache, as git's
// index does, and reads only entries whose stat differs; of those, only
// the ones whose content (a hash) or type differ are written.
//
// It is a three-way update, the cache being the base: a path the source
// did not change keeps what the store has (a change made in the store
// stays); a path the source changed takes the source's version; a path the
// source deleted is deleted; a path only the store has is kept. A path
// with no cache entry (the cache is missing or older) counts as changed
// only if it differs from what dst holds. Hard links among new files are
// kept; a new link to an unchanged file is a copy.
//
// Like Import, it reads only what it listed inside src. It is not atomic
// by itself: update a fresh fork and commit it (the CLI does).
func Update(ctx context.Context, fs *cowfs.View, dst cowfs.InodeID, src string, cache *Cache, opts Options) (Changes, error) {
	root, st, err := openRoot(src)
	if err != nil {
		return Changes{}, err
	}
	defer root.Close()
	opts.Cache = cache
	u := &updater{importer: newImporter(ctx, fs, opts), seen: make(map[string]bool, cache.Len()), kids: map[string]int{}}
	for p := range cache.m {
		dir := ""
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir = p[:i]
		}
		u.kids[dir]++
	}
	u.added = func(rel string) { u.change(rel, Added) }
	u.root = resolvedRoot(src)
	if err := u.dir(root, "", dst); err != nil {
		return u.c, err
	}
	if err := u.attrs(dst, &st, ""); err != nil {
		return u.c, err
	}
	u.c.Bytes = u.p.Bytes
	u.p.Hashed = u.c.Hashed
	// Entries gone from both sides, or under what was kept: cached no more.
	for p := range cache.m {
		if !u.seen[p] && !cache.dirty[p] {
			cache.remove(p)
		}
	}
	return u.c, nil
}

type updater struct {
	*importer
	c Changes
	// seen holds the cached paths still in the source (or kept).
	seen map[string]bool
	// kids counts the cached entries of each cached directory.
	kids map[string]int
}

func (u *updater) change(rel, kind string) {
	switch kind {
	case Added:
		u.c.Added++
	case Modified:
		u.c.Modified++
	case Deleted:
		u.c.Deleted++
	}
	u.c.Paths = append(u.c.Paths, PathChange{Path: rel, Kind: kind})
	u.seen[rel] = true
}

// listView reads every entry of directory ino of the view.
func (u *updater) listView(ino cowfs.InodeID) (map[string]cowfs.DirEntry, error) {
	out := map[string]cowfs.DirEntry{}
	var cookie uint64
	for {
		ents, eof, err := u.fs.ReadDir(ino, cookie, 1024)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			out[e.Name] = e
			cookie = e.Cookie
		}
		if eof || len(ents) == 0 {
			return out, nil
		}
	}
}

func viewType(t uint32) cowfs.FileType {
	switch t {
	case unix.S_IFDIR:
		return cowfs.TypeDir
	case unix.S_IFREG:
		return cowfs.TypeRegular
	case unix.S_IFLNK:
		return cowfs.TypeSymlink
	case unix.S_IFSOCK:
		return cowfs.TypeSocket
	case unix.S_IFCHR:
		return cowfs.TypeChar
	case unix.S_IFBLK:
		return cowfs.TypeBlock
	}
	return cowfs.TypeFIFO
}

func (u *updater) dir(d *srcDir, rel string, dino cowfs.InodeID) error {
	names, err := d.names()
	if err != nil {
		return wrap(rel, err)
	}
	sort.Strings(names)
	// The view's entries are listed only when needed: for an entry whose
	// stat moved, or when the source lost a cached entry here. A
	// directory where nothing changed costs its source's lstats alone.
	var view map[string]cowfs.DirEntry
	lookup := func(name string) (cowfs.DirEntry, bool, error) {
		if view == nil {
			if view, err = u.listView(dino); err != nil {
				return cowfs.DirEntry{}, false, wrap(rel, err)
			}
		}
		e, ok := view[name]
		return e, ok, nil
	}
	inSource := make(map[string]bool, len(names))
	cachedHere := 0
	for _, name := range names {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		inSource[name] = true
		crel := join(rel, name)
		if _, ok := u.opts.Cache.Get(crel); ok {
			cachedHere++
		}
		st, err := d.lstat(name)
		if err != nil {
			return wrap(crel, err)
		}
		if err := u.entry(d, crel, name, &st, dino, lookup); err != nil {
			return err
		}
		u.p.Path = crel
		if u.opts.Progress != nil {
			u.opts.Progress(u.p)
		}
	}
	if cachedHere == u.kids[rel] {
		return nil // every cached entry is still in the source
	}
	// What the view has and the source no longer does: deleted by the
	// source if it was cached, else the store's own.
	if _, _, err := lookup(""); err != nil {
		return err
	}
	gone := make([]string, 0)
	for name := range view {
		if !inSource[name] {
			if _, cached := u.opts.Cache.Get(join(rel, name)); cached {
				gone = append(gone, name)
			}
		}
	}
	sort.Strings(gone)
	for _, name := range gone {
		crel := join(rel, name)
		if err := u.removeAll(dino, name, view[name], crel); err != nil {
			return wrap(crel, err)
		}
	}
	return nil
}

func (u *updater) entry(d *srcDir, rel, name string, st *unix.Stat_t, dino cowfs.InodeID, lookup func(string) (cowfs.DirEntry, bool, error)) error {
	t := fileType(st)
	c, cached := u.opts.Cache.Get(rel)
	u.p.Scanned++
	if cached {
		u.seen[rel] = true
		if t != unix.S_IFDIR && c.sameStat(st) {
			u.c.Unchanged++
			return nil
		}
	}
	if gd, err := u.outsideGitDir(d, rel, name, st); err != nil {
		return err
	} else if gd != "" {
		if rel != ".git" {
			return gitOutside(rel, gd, u.root)
		}
		// Materialized by the import: the branch's git is its own now.
		u.keep(rel)
		return nil
	}
	var ve cowfs.DirEntry
	var inView bool
	if t == unix.S_IFDIR && cached && c.Mode == uint32(st.Mode) {
		// The common case of a directory: one lookup, not a listing.
		a, err := u.fs.Lookup(dino, name)
		switch {
		case err == nil:
			ve, inView = cowfs.DirEntry{Name: name, Ino: a.Ino, Type: a.Type}, true
		case !errors.Is(err, syscall.ENOENT):
			return wrap(rel, err)
		}
	} else {
		var err error
		if ve, inView, err = lookup(name); err != nil {
			return err
		}
	}
	if t == unix.S_IFDIR && inView && ve.Type == cowfs.TypeDir {
		if beforeOpen != nil {
			beforeOpen(rel)
		}
		sub, err := d.openDir(name, rel, st)
		if err != nil {
			return wrap(rel, err)
		}
		defer sub.Close()
		if err := u.dir(sub, rel, ve.Ino); err != nil {
			return err
		}
		if cached && c.sameStat(st) {
			return nil
		}
		if err := u.attrs(ve.Ino, st, rel); err != nil {
			return err
		}
		u.record(rel, st, [32]byte{})
		return nil
	}
	if cached && !inView && (t == unix.S_IFDIR || c.sameStat(st)) {
		// The store deleted what the source did not change (a
		// directory: whatever happened inside): keep it deleted.
		u.keep(rel)
		return nil
	}
	if cached && c.sameStat(st) {
		u.c.Unchanged++
		return nil
	}
	if t != unix.S_IFDIR && inView && ve.Type == viewType(t) {
		same, h, err := u.sameContent(d, name, rel, st, c, cached, ve.Ino)
		if err != nil {
			return err
		}
		if same {
			// Only the stat moved (a touch, a chmod): attributes.
			a, err := u.fs.GetAttr(ve.Ino)
			if err != nil {
				return wrap(rel, err)
			}
			if t != unix.S_IFLNK {
				if a.Mode != uint32(st.Mode)&cowfs.ModePerm || a.UID != st.Uid || a.GID != st.Gid {
					u.change(rel, Modified)
				}
				if err := u.attrs(ve.Ino, st, rel); err != nil {
					return err
				}
			}
			u.record(rel, st, h)
			return nil
		}
	}
	kind := Added
	if inView {
		if err := u.removeAll(dino, name, ve, ""); err != nil {
			return wrap(rel, err)
		}
		kind = Modified
	}
	// entry lists what it adds through u.added; a replaced path is one
	// modification.
	added := u.added
	if kind == Modified {
		u.change(rel, Modified)
		u.added = func(r string) {
			if r != rel {
				u.change(r, Added)
			}
		}
	}
	err := u.importer.entry(d, rel, name, st, dino)
	u.added = added
	return err
}

// keep marks rel and everything cached under it as seen, so the cache
// keeps them.
func (u *updater) keep(rel string) {
	u.seen[rel] = true
	pfx := rel + "/"
	for p := range u.opts.Cache.m {
		if strings.HasPrefix(p, pfx) {
			u.seen[p] = true
		}
	}
}

// sameContent reads entry name of the source (whose stat differs from the
// cache, or is not cached) and reports whether its content is the one
// cached (or, not cached, the one the view's ino holds), with its hash.
func (u *updater) sameContent(d *srcDir, name, rel string, st *unix.Stat_t, c Stat, cached bool, ino cowfs.InodeID) (bool, [32]byte, error) {
	var h [32]byte
	t := fileType(st)
	if beforeOpen != nil && (t == unix.S_IFREG || t == unix.S_IFLNK) {
		beforeOpen(rel)
	}
	switch t {
	case unix.S_IFREG:
		u.c.Hashed++
		u.p.Hashed++
		hs := blake3.New()
		if st.Size > 0 {
			f, err := d.open(name, st)
			if err != nil {
				return false, h, wrap(rel, err)
			}
			_, err = io.Copy(hs, ctxReader{u.ctx, &sizedReader{f: f, st: st, left: st.Size}})
			f.Close()
			if err != nil {
				return false, h, wrap(rel, err)
			}
		}
		copy(h[:], hs.Sum(nil))
		if cached {
			return c.Mode&unix.S_IFMT == unix.S_IFREG && c.Hash == h, h, nil
		}
		vh, err := u.viewHash(ino, st.Size)
		if err != nil {
			return false, h, wrap(rel, err)
		}
		return vh == h, h, nil
	case unix.S_IFLNK:
		u.c.Hashed++
		u.p.Hashed++
		target, err := d.readlink(name, st)
		if err != nil {
			return false, h, wrap(rel, err)
		}
		h = blake3.Sum256([]byte(target))
		if cached {
			return c.Mode&unix.S_IFMT == unix.S_IFLNK && c.Hash == h, h, nil
		}
		vt, err := u.fs.Readlink(ino)
		if err != nil {
			return false, h, wrap(rel, err)
		}
		return vt == target, h, nil
	case unix.S_IFCHR, unix.S_IFBLK:
		a, err := u.fs.GetAttr(ino)
		if err != nil {
			return false, h, wrap(rel, err)
		}
		rdev := uint64(st.Rdev)
		return a.Rdev == uint64(unix.Major(rdev))<<32|uint64(unix.Minor(rdev)), h, nil
	}
	return true, h, nil // FIFOs and sockets have no content
}

// viewHash hashes the content of regular file ino of the view, or returns
// a zero hash if its size is not size.
func (u *updater) viewHash(ino cowfs.InodeID, size int64) ([32]byte, error) {
	var h [32]byte
	a, err := u.fs.GetAttr(ino)
	if err != nil || int64(a.Size) != size {
		return h, err
	}
	hs := blake3.New()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n, eof, err := u.fs.ReadAt(ino, buf, off)
		if err != nil {
			return h, err
		}
		hs.Write(buf[:n])
		off += int64(n)
		if eof || n == 0 {
			break
		}
	}
	copy(h[:], hs.Sum(nil))
	return h, nil
}

// attrs sets the mode, owner and times of the view's ino to the source's
// when they differ.
func (u *updater) attrs(ino cowfs.InodeID, st *unix.Stat_t, rel string) error {
	a, err := u.fs.GetAttr(ino)
	if err != nil {
		return wrap(rel, err)
	}
	mode := uint32(st.Mode) & cowfs.ModePerm
	mt := tsTime(st.Mtim)
	if a.Mode == mode && a.UID == st.Uid && a.GID == st.Gid && a.Mtime.Equal(mt) {
		return nil
	}
	at := tsTime(st.Atim)
	if _, err := u.fs.SetAttr(ino, cowfs.SetAttr{Mode: &mode, UID: &st.Uid, GID: &st.Gid, Atime: &at, Mtime: &mt}); err != nil {
		return wrap(rel, err)
	}
	return nil
}

// removeAll removes entry name (e) of directory dir from the view, and
// what it holds. With rel set, it lists each path removed as deleted.
func (u *updater) removeAll(dir cowfs.InodeID, name string, e cowfs.DirEntry, rel string) error {
	if e.Type == cowfs.TypeDir {
		kids, err := u.listView(e.Ino)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(kids))
		for n := range kids {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			crel := ""
			if rel != "" {
				crel = rel + "/" + n
			}
			if err := u.removeAll(e.Ino, n, kids[n], crel); err != nil {
				return err
			}
		}
		if err := u.fs.Rmdir(dir, name); err != nil {
			return err
		}
	} else if err := u.fs.Unlink(dir, name); err != nil {
		return err
	}
	if rel != "" {
		u.change(rel, Deleted)
		u.opts.Cache.remove(rel)
		delete(u.seen, rel)
	}
	return nil
}

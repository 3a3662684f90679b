package cowfs

import (
	"encoding/binary"
	"errors"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/kv"
)

const (
	// MaxNameLen is the longest directory entry name, in bytes.
	MaxNameLen   = 255
	maxNameLen   = MaxNameLen
	maxTargetLen = 4096
)

// CheckName validates a name for a directory entry: ENOENT for "" (as
// POSIX path resolution answers), EINVAL for "." and ".." (callers that
// give them a meaning, LOOKUP say, handle them first) and for names
// holding '/' or NUL, ENAMETOOLONG beyond MaxNameLen. It is the one name
// check: the NFS server uses it too.
func CheckName(name string) syscall.Errno {
	switch {
	case name == "":
		return syscall.ENOENT
	case name == "." || name == "..":
		return syscall.EINVAL
	case len(name) > MaxNameLen:
		return syscall.ENAMETOOLONG
	case strings.ContainsAny(name, "/\x00"):
		return syscall.EINVAL
	}
	return 0
}

func now() int64 { return time.Now().UnixNano() }

// slotRec is the topmost record of one directory slot.
type slotRec struct {
	found bool // some layer has a record for the slot
	e     entry
	layer LayerID
}

// resolveSlot returns the topmost record of slot s of dir across layers.
func resolveSlot(tx kv.Txn, layers []LayerID, dir InodeID, s uint64) (slotRec, error) {
	for _, l := range layers {
		v, err := tx.Get(entryKey(l, dir, s))
		if errors.Is(err, kv.ErrNotFound) {
			continue
		}
		if err != nil {
			return slotRec{}, err
		}
		e, err := decodeEntry(v)
		if err != nil {
			return slotRec{}, err
		}
		return slotRec{found: true, e: e, layer: l}, nil
	}
	return slotRec{}, nil
}

// findEntry looks name up in dir, in either of its Unicode forms (see
// foldName). It returns the entry (holding the stored form of the name)
// and its slot, or ENOENT together with the first free slot where name
// could go.
func (f *View) findEntry(tx kv.Txn, st state, dir InodeID, name string) (entry, uint64, error) {
	layers, err := f.layersOf(tx, st, dir)
	if err != nil {
		return entry{}, 0, err
	}
	return f.findEntryIn(tx, layers, dir, name)
}

// findEntryIn is findEntry given the layers holding a record of dir.
func (f *View) findEntryIn(tx kv.Txn, layers []LayerID, dir InodeID, name string) (entry, uint64, error) {
	key := foldName(name)
	e, s, free, err := probe(tx, layers, dir, hashSlot(key), key)
	if err == nil || !errors.Is(err, syscall.ENOENT) {
		return e, s, err
	}
	if f.opts.LegacyNameSlots {
		for _, start := range legacySlots(name) {
			e, s, _, lerr := probe(tx, layers, dir, start, key)
			if lerr == nil || !errors.Is(lerr, syscall.ENOENT) {
				return e, s, lerr
			}
		}
	}
	if free == 0 {
		return entry{}, 0, syscall.ENOSPC // pathological hash collisions
	}
	return entry{}, free, syscall.ENOENT
}

// probe walks the probe chain of dir from slot s looking for the name whose
// folded form is key. It returns the entry and its slot, or ENOENT and the
// first free slot of the chain (0 if none within maxProbe).
func probe(tx kv.Txn, layers []LayerID, dir InodeID, s uint64, key string) (entry, uint64, uint64, error) {
	free := uint64(0)
	for i := 0; i < maxProbe; i++ {
		r, err := resolveSlot(tx, layers, dir, s)
		if err != nil {
			return entry{}, 0, 0, err
		}
		if !r.found {
			if free == 0 {
				free = s
			}
			return entry{}, 0, free, syscall.ENOENT
		}
		if r.e.Ino == 0 {
			if free == 0 {
				free = s
			}
		} else if sameName(r.e.Name, key) {
			return r.e, s, 0, nil
		}
		s++
		if s == 1<<63 {
			s = firstSlot
		}
	}
	return entry{}, 0, free, syscall.ENOENT
}

// freeSlot returns the slot where name can be added to dir, or EEXIST.
func (f *View) freeSlot(tx kv.Txn, st state, dir InodeID, name string) (uint64, error) {
	_, s, err := f.findEntry(tx, st, dir, name)
	switch {
	case err == nil:
		return 0, syscall.EEXIST
	case errors.Is(err, syscall.ENOENT):
		return s, nil
	}
	return 0, err
}

// dirForWrite loads directory dir for a change in the top layer.
func (f *View) dirForWrite(tx kv.Txn, st state, dir InodeID) (*inode, error) {
	d, err := f.inodeForWrite(tx, st, dir)
	if err != nil {
		return nil, err
	}
	if d.Type != TypeDir {
		return nil, syscall.ENOTDIR
	}
	return d, nil
}

// inodeForWrite loads ino for a change in the top layer: when the visible
// record is in a lower layer, it becomes a copy-up whose Cut is the current
// size. A missing inode is ESTALE (the caller holds a reference to it).
func (f *View) inodeForWrite(tx kv.Txn, st state, ino InodeID) (*inode, error) {
	n, from, err := f.getInode(tx, st, ino)
	if errors.Is(err, syscall.ENOENT) {
		return nil, syscall.ESTALE
	}
	if err != nil {
		return nil, err
	}
	if from != st.stack[0] {
		n.Cut = n.Size
		// A truncate's leftovers in the lower layer lie past its size,
		// so past the new Cut: the copy has none of its own.
		n.Stale, n.StaleFrom = false, 0
	}
	return n, nil
}

func (f *View) put(tx kv.Txn, st state, n *inode) error {
	return tx.Set(inodeKey(st.stack[0], n.Ino), n.encode())
}

// setEntry stores dir/name -> ino at slot s of the top layer. A silly-rename
// name is also noted in the layer's silly index (see DropSillyLocked).
func (f *View) setEntry(tx kv.Txn, st state, dir InodeID, s uint64, e entry) error {
	if e.Ino != 0 && IsSillyName(e.Name) {
		if err := tx.Set(sillyKey(st.stack[0], dir, s), u64(nil, uint64(e.Ino))); err != nil {
			return err
		}
	}
	return tx.Set(entryKey(st.stack[0], dir, s), e.encode())
}

// clearEntry removes the entry at slot s: a whiteout when a lower layer has
// a record there or the probe chain continues past it, else a plain delete.
func (f *View) clearEntry(tx kv.Txn, st state, dir InodeID, s uint64) error {
	layers, err := f.layersOf(tx, st, dir)
	if err != nil {
		return err
	}
	var lower []LayerID
	for _, l := range layers {
		if l != st.stack[0] {
			lower = append(lower, l)
		}
	}
	r, err := resolveSlot(tx, lower, dir, s)
	if err != nil {
		return err
	}
	next, err := resolveSlot(tx, layers, dir, s+1)
	if err != nil {
		return err
	}
	if !r.found && !next.found {
		return tx.Delete(entryKey(st.stack[0], dir, s))
	}
	return f.setEntry(tx, st, dir, s, entry{})
}

func (f *View) getAttr(ino InodeID) (Attr, error) {
	var a Attr
	tg := f.topGen(f.readGen()) // before the snapshot
	err := f.view(func(tx kv.Txn, st state) error {
		top, err := f.topRecord(tx, st.stack[0], ino, tg)
		if err != nil {
			return err
		}
		n, _, _, err := f.inodeOver(tx, st, ino, top, false)
		if err != nil {
			return err
		}
		a = n.attr()
		return nil
	})
	if errors.Is(err, syscall.ENOENT) {
		err = syscall.ESTALE
	}
	return a, f.wrap("getattr", "", err)
}

func (f *View) lookup(dir InodeID, name string) (Attr, error) {
	_, a, err := f.lookupDir(dir, name)
	return a, err
}

// lookupDir is lookup that also returns dir's attributes, read in the same
// transaction (zero when the error is about dir itself: ESTALE). It reads
// dir's record once and resolves the name through the layers it found.
func (f *View) lookupDir(dir InodeID, name string) (Attr, Attr, error) {
	var da, a Attr
	tg := f.topGen(f.readGen()) // before the snapshot
	err := f.view(func(tx kv.Txn, st state) error {
		da = Attr{}
		// The records, the top layer's from the top-layer cache.
		get := func(ino InodeID, withLayers bool) (*inode, []LayerID, error) {
			top, err := f.topRecord(tx, st.stack[0], ino, tg)
			if err != nil {
				return nil, nil, err
			}
			n, _, layers, err := f.inodeOver(tx, st, ino, top, withLayers)
			return n, layers, err
		}
		d, layers, err := get(dir, true)
		if errors.Is(err, syscall.ENOENT) {
			return syscall.ESTALE
		}
		if err != nil {
			return err
		}
		da = d.attr()
		if d.Type != TypeDir {
			return syscall.ENOTDIR
		}
		if name == "." {
			a = da
			return nil
		}
		if name == ".." {
			p := RootIno
			if len(d.Links) > 0 {
				p = d.Links[0].Dir
			}
			n, _, err := get(p, false)
			if err != nil {
				return err
			}
			a = n.attr()
			return nil
		}
		if e := CheckName(name); e != 0 {
			return e
		}
		en, _, err := f.findEntryIn(tx, layers, dir, name)
		if err != nil {
			return err
		}
		n, _, err := get(en.Ino, false)
		if err != nil {
			return err
		}
		a = n.attr()
		return nil
	})
	return da, a, f.wrap("lookup", name, err)
}

// getAttrs returns the attributes of each of inos (nil for one that does
// not exist) in one transaction.
func (f *View) getAttrs(inos []InodeID) ([]*Attr, error) {
	out := make([]*Attr, len(inos))
	attrs := make([]Attr, len(inos))
	tg := f.topGen(f.readGen()) // before the snapshot
	err := f.view(func(tx kv.Txn, st state) error {
		// The top layer's records: cached (topcache.go), or read with
		// one iteration (topRecords), or one by one.
		tops := make(map[InodeID]*inode, len(inos))
		var miss []InodeID
		for _, ino := range inos {
			if td := f.topEntry(st.stack[0], ino, tg); td != nil {
				tops[ino] = td.rec
			} else {
				miss = append(miss, ino)
			}
		}
		read, err := topRecords(tx, st.stack[0], miss)
		if err != nil {
			return err
		}
		for ino, rec := range read {
			tops[ino] = rec
			if tg.ok {
				f.fillTop(st.stack[0], ino, rec, tg)
			}
		}
		for i, ino := range inos {
			out[i] = nil
			var n *inode
			var err error
			top, ok := tops[ino]
			if !ok {
				if top, err = f.topRecord(tx, st.stack[0], ino, tg); err != nil {
					return err
				}
			}
			n, _, _, err = f.inodeOver(tx, st, ino, top, false)
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			if err != nil {
				return err
			}
			attrs[i] = n.attr()
			out[i] = &attrs[i]
		}
		return nil
	})
	if err != nil {
		return nil, f.wrap("getattr", "", err)
	}
	return out, nil
}

// topRecords reads layer l's records of inos (nil for those it holds
// none of) with one key iteration over the range of their numbers, which
// costs about as much as two point reads in Badger: a listing's files,
// created one after another, have neighbouring numbers. It visits at most
// scanPerIno keys per inode asked for (the range may hold many others);
// the inodes it did not reach are left out of the map, for the caller to
// read one by one. Fewer than scanMin inodes: none read.
func topRecords(tx kv.Txn, l LayerID, inos []InodeID) (map[InodeID]*inode, error) {
	if len(inos) < scanMin {
		return nil, nil
	}
	want := make(map[InodeID]bool, len(inos))
	lo, hi := inos[0], inos[0]
	for _, ino := range inos {
		want[ino] = true
		lo, hi = min(lo, ino), max(hi, ino)
	}
	out := make(map[InodeID]*inode, len(inos))
	prefix := append(layerPrefix(l), kindInode)
	budget := scanPerIno * len(inos)
	reached := hi // every inode up to it was seen or is absent
	err := tx.Iterate(prefix, inodeKey(l, lo), false, func(k, v []byte) (bool, error) {
		if len(k) != len(prefix)+8 {
			return true, nil
		}
		ino := InodeID(binary.BigEndian.Uint64(k[len(prefix):]))
		if ino > hi {
			return false, nil
		}
		if want[ino] {
			n, err := decodeInode(ino, v)
			if err != nil {
				return false, err
			}
			out[ino] = n
		}
		if budget--; budget == 0 {
			reached = ino // out of budget: the rest is unknown
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	for ino := range want {
		if _, ok := out[ino]; !ok && ino <= reached {
			out[ino] = nil // the layer holds no record of it
		}
	}
	return out, nil
}

// scanMin and scanPerIno bound topRecords: the fewest inodes worth an
// iteration, and the keys it may visit per inode asked for.
const (
	scanMin    = 4
	scanPerIno = 4
)

// view runs fn in a read-only transaction on the view's current stack.
// Errors come back raw; callers wrap them with their op and name.
func (f *View) view(fn func(tx kv.Txn, st state) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st, err := f.begin(false)
	if err != nil {
		return err
	}
	return f.store.View(f.ctx, func(tx kv.Txn) error { return fn(tx, st) })
}

// known resolves an inode the caller holds a reference to (a handle): a
// missing one is ESTALE, not ENOENT.
func (f *View) known(tx kv.Txn, st state, ino InodeID) (*inode, error) {
	n, _, err := f.getInode(tx, st, ino)
	if errors.Is(err, syscall.ENOENT) {
		return nil, syscall.ESTALE
	}
	return n, err
}

// dirMark names the directory inode a namespace change writes and the
// ctime (nanoseconds, from now()) the change gives it. After a commit of
// unknown outcome the directory's record in the top layer tells whether
// the change was applied: nsMu is held and only this view (the branch's
// owner) writes the branch, so the record has either the ctime the change
// wrote or the one it had before.
type dirMark struct {
	dir   InodeID
	ctime int64
}

// set records d, as the transaction stores it, as the change's mark.
func (m *dirMark) set(d *inode) { m.dir, m.ctime = d.Ino, d.Ctime }

// unknownAttempts bounds how often nsUpdate runs a change whose commits
// were not applied though their answers were lost.
const unknownAttempts = 3

// nsUpdate is update, with nsMu held, for a single-entry namespace change
// (CREATE, MKDIR, MKNOD, SYMLINK, LINK, REMOVE, RMDIR, RENAME) whose fn
// records in mk the directory it changes. When the commit's answer is
// lost (kv.ErrUnknownOutcome: an etcd leader lost mid-commit) it reads
// the directory again: if the change was applied it succeeds; if not,
// nothing changed and it runs the change again. If the store cannot be
// read either, the unknown outcome is the error: the client's retry
// then meets the state as it is (a REMOVE whose change was applied
// answers NFS3ERR_NOENT).
func (f *View) nsUpdate(op, name string, fn func(tx kv.Txn, st state, mk *dirMark) error) error {
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	return f.write(op, name, func(st state) error {
		for attempt := 1; ; attempt++ {
			var mk dirMark
			err := f.store.Update(f.ctx, func(tx kv.Txn) error {
				mk = dirMark{}
				return fn(tx, st, &mk)
			})
			if !errors.Is(err, kv.ErrUnknownOutcome) || mk.dir == 0 {
				return err
			}
			applied, rerr := f.markApplied(st, mk)
			switch {
			case rerr != nil:
				f.opts.Logger.Warn("cowfs: outcome of a change unknown, and the store cannot be read to learn it",
					"op", op, "path", name, "err", err, "read_err", rerr)
				return err
			case applied:
				f.opts.Logger.Info("cowfs: a change whose answer was lost was applied", "op", op, "path", name)
				return nil
			case attempt == unknownAttempts:
				return err
			}
			f.opts.Logger.Info("cowfs: a change whose answer was lost was not applied; running it again", "op", op, "path", name)
		}
	})
}

// markApplied reads the top layer's record of mk's directory: it carries
// mk's ctime if the change that set mk was applied. A commit's answer is
// lost mostly when the cluster is losing its leader, and a read fails
// until it has a new one: while the store says it is unavailable, it
// reads again for up to markReadFor, so that the change's outcome is
// answered (a REMOVE that was applied answers OK) rather than left to a
// retry that would find the entry gone.
func (f *View) markApplied(st state, mk dirMark) (bool, error) {
	var applied bool
	wait := 50 * time.Millisecond
	deadline := time.Now().Add(markReadFor)
	for {
		err := f.store.View(f.ctx, func(tx kv.Txn) error {
			n, err := layerInode(tx, st.stack[0], mk.dir)
			applied = err == nil && n != nil && n.Ctime == mk.ctime
			return err
		})
		if err == nil || !errors.Is(err, kv.ErrUnavailable) || time.Now().Add(wait).After(deadline) {
			return applied, err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// markReadFor bounds how long markApplied reads again a store that is
// unavailable: about an etcd election or two, well within an NFS
// client's timeout.
const markReadFor = 5 * time.Second

// write runs commit with the view's current stack, which stays the stack
// until commit returns, once the view is known writable; it wraps the
// error.
func (f *View) write(op, name string, commit func(st state) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st, err := f.begin(true)
	if err != nil {
		return pathErr(op, name, err.(syscall.Errno))
	}
	f.dirty.Store(true) // before the commit: a racing fork must not miss it
	// The top layer changes: what READs cached of it is not used from
	// here on, nor filled by a READ that overlaps the change (topcache.go).
	c := f.s.frozen
	c.begin(st.stack[:1])
	defer c.end(st.stack[:1])
	return f.wrap(op, name, commit(st))
}

// newInode checks name and returns a new inode of type t to link as
// dir/name; errors come wrapped for op.
func (f *View) newInode(op string, t FileType, a NewAttr, dir InodeID, name string) (*inode, error) {
	if e := CheckName(name); e != 0 {
		return nil, pathErr(op, name, e)
	}
	ino, err := f.alloc.Next(f.ctx, "ino")
	if err != nil {
		return nil, f.wrap(op, name, err)
	}
	ts := now()
	n := &inode{Ino: InodeID(ino), Gen: 1, Type: t, Mode: a.Mode & ModePerm, Nlink: 1,
		UID: a.UID, GID: a.GID, Rdev: a.Rdev, Atime: ts, Mtime: ts, Ctime: ts,
		Links: []link{{dir, name}}}
	if !a.Atime.IsZero() {
		n.Atime = a.Atime.UnixNano()
	}
	if !a.Mtime.IsZero() {
		n.Mtime = a.Mtime.UnixNano()
	}
	if t == TypeDir {
		n.Nlink = 2
	}
	return n, nil
}

// addEntry links n into d at slot s and updates the directory times.
func (f *View) addEntry(tx kv.Txn, st state, d *inode, s uint64, n *inode, name string) error {
	if err := f.setEntry(tx, st, d.Ino, s, entry{Ino: n.Ino, Type: n.Type, Name: name}); err != nil {
		return err
	}
	ts := now()
	d.Mtime, d.Ctime = ts, ts
	if n.Type == TypeDir {
		d.Nlink++
	}
	if err := f.put(tx, st, d); err != nil {
		return err
	}
	return f.put(tx, st, n)
}

func (f *View) create(dir InodeID, name string, how CreateHow, a NewAttr, verf uint64) (Attr, error) {
	n, err := f.newInode("create", TypeRegular, a, dir, name)
	if err != nil {
		return Attr{}, err
	}
	if how == CreateExclusive {
		n.HasVerf, n.Verifier = true, verf
	}
	var out Attr
	err = f.nsUpdate("create", name, func(tx kv.Txn, st state, mk *dirMark) error {
		d, err := f.dirForWrite(tx, st, dir)
		if err != nil {
			return err
		}
		en, s, err := f.findEntry(tx, st, dir, name)
		if err == nil {
			old, _, err := f.getInode(tx, st, en.Ino)
			if err != nil {
				return err
			}
			switch {
			case how == CreateGuarded:
				return syscall.EEXIST
			case how == CreateExclusive:
				if old.Type == TypeRegular && old.HasVerf && old.Verifier == verf {
					out = old.attr()
					return nil
				}
				return syscall.EEXIST
			case old.Type == TypeDir:
				return syscall.EISDIR
			}
			out = old.attr()
			return nil
		}
		if !errors.Is(err, syscall.ENOENT) {
			return err
		}
		if err := f.addEntry(tx, st, d, s, n, name); err != nil {
			return err
		}
		mk.set(d)
		out = n.attr()
		return nil
	})
	return out, err
}

func (f *View) mknode(dir InodeID, name string, t FileType, a NewAttr, target string) (Attr, error) {
	op := "mknod"
	switch t {
	case TypeDir:
		op = "mkdir"
	case TypeSymlink:
		op = "symlink"
		if len(target) > maxTargetLen {
			return Attr{}, pathErr(op, name, syscall.ENAMETOOLONG)
		}
		if strings.IndexByte(target, 0) >= 0 {
			return Attr{}, pathErr(op, name, syscall.EINVAL)
		}
	case TypeFIFO, TypeSocket, TypeChar, TypeBlock:
	default:
		return Attr{}, pathErr(op, name, syscall.EINVAL)
	}
	n, err := f.newInode(op, t, a, dir, name)
	if err != nil {
		return Attr{}, err
	}
	if t == TypeSymlink {
		n.Mode = 0o777
		if a.Mode != 0 {
			n.Mode = a.Mode & ModePerm
		}
		n.Target = target
	}
	var out Attr
	err = f.nsUpdate(op, name, func(tx kv.Txn, st state, mk *dirMark) error {
		d, err := f.dirForWrite(tx, st, dir)
		if err != nil {
			return err
		}
		s, err := f.freeSlot(tx, st, dir, name)
		if err != nil {
			return err
		}
		if err := f.addEntry(tx, st, d, s, n, name); err != nil {
			return err
		}
		mk.set(d)
		out = n.attr()
		return nil
	})
	return out, err
}

func (f *View) link(ino, dir InodeID, name string) (Attr, error) {
	if e := CheckName(name); e != 0 {
		return Attr{}, pathErr("link", name, e)
	}
	var out Attr
	err := f.nsUpdate("link", name, func(tx kv.Txn, st state, mk *dirMark) error {
		n, err := f.inodeForWrite(tx, st, ino)
		if err != nil {
			return err
		}
		if n.Type == TypeDir {
			return syscall.EPERM
		}
		d, err := f.dirForWrite(tx, st, dir)
		if err != nil {
			return err
		}
		s, err := f.freeSlot(tx, st, dir, name)
		if err != nil {
			return err
		}
		if n.Nlink >= 65000 {
			return syscall.EMLINK
		}
		n.Links = append(n.Links, link{dir, name})
		n.Nlink = uint32(len(n.Links))
		n.Ctime = now()
		if err := f.addEntry(tx, st, d, s, n, name); err != nil {
			return err
		}
		mk.set(d)
		out = n.attr()
		return nil
	})
	return out, err
}

// dropLink removes the link (dir, name) from n and deletes n when no link
// is left: a tombstone when lower layers hold it, else its records go.
func (f *View) dropLink(tx kv.Txn, st state, n *inode, dir InodeID, name string, left *[]leftData) error {
	for i, l := range n.Links {
		if l.Dir == dir && l.Name == name {
			n.Links = append(n.Links[:i:i], n.Links[i+1:]...)
			break
		}
	}
	n.Ctime = now()
	if n.Type == TypeDir {
		n.Nlink = 0
	} else {
		n.Nlink = uint32(len(n.Links))
	}
	if n.Type == TypeDir || len(n.Links) == 0 {
		return f.deleteInode(tx, st, n, left)
	}
	return f.put(tx, st, n)
}

// leftData names a deleted inode whose blocks in a layer its
// transaction did not all delete (see deleteInode).
type leftData struct {
	layer LayerID
	ino   InodeID
}

// dataDeletesInTxn is how many of a deleted inode's block references the
// transaction that deletes it may delete itself: what the store's limits
// leave after the namespace change (a few dozen reads and writes, and a
// read per layer of the stack), at most 50,000. On etcd's defaults that
// is about 90, so the blocks of a file over ~3 MiB go in later batches.
func dataDeletesInTxn(lim kv.Limits, depth int) int {
	const reserve = 32
	n := min(lim.Writes, lim.Reads) - reserve - depth
	if lim.Bytes > 0 {
		n = min(n, lim.Bytes/2/(64+2*lim.OpBytes))
	}
	return max(1, min(n, 50000))
}

// deleteInode deletes n, which lost its last link, in the top layer. It
// deletes the top layer's blocks of n as far as the store's limits allow
// in tx; if some may remain it appends them to left, for the caller to
// purge (purgeLeft) once tx committed: nothing reads them then, since n's
// record is gone from the top layer.
func (f *View) deleteInode(tx kv.Txn, st state, n *inode, left *[]leftData) error {
	limit := dataDeletesInTxn(f.s.limits(), len(st.stack))
	if more, err := f.dropOwnData(tx, st, n.Ino, 0, limit); err != nil {
		return err
	} else if more {
		*left = append(*left, leftData{st.stack[0], n.Ino})
	}
	if n.Stale {
		if err := tx.Delete(staleKey(st.stack[0], n.Ino)); err != nil {
			return err
		}
	}
	layers, err := f.layersOf(tx, st, n.Ino)
	if err != nil {
		return err
	}
	for _, l := range layers {
		if l != st.stack[0] {
			t := &inode{Ino: n.Ino, Gen: n.Gen, Type: n.Type, Deleted: true}
			return f.put(tx, st, t)
		}
	}
	return tx.Delete(inodeKey(st.stack[0], n.Ino))
}

// purgeLeft deletes, in transactions of their own, the blocks deleteInode
// left. The namespace change committed already, so a failure is logged,
// not returned: the blocks are freed with their layer.
func (f *View) purgeLeft(left []leftData) {
	for _, l := range left {
		if err := f.s.PurgeData(f.ctx, l.layer, []InodeID{l.ino}); err != nil {
			f.s.opts.Logger.Warn("cowfs: the blocks of a deleted file stay until their layer is reclaimed", "layer", l.layer, "inode", l.ino, "err", err)
		}
	}
}

// dropOwnData deletes the top layer's blocks of ino from block index from,
// at most limit of them when limit > 0, and reports whether more may
// remain (it stopped at limit). A deleted inode may leave blocks behind
// (its record is gone, so nothing reads them) for purgeLeft rather than
// overflow the transaction, and so may a truncate, which marks them in
// the record (inode.Stale) for purgeStale.
func (f *View) dropOwnData(tx kv.Txn, st state, ino InodeID, from uint64, limit int) (bool, error) {
	pfx := dataPrefix(st.stack[0], ino)
	var keys [][]byte
	err := tx.Iterate(pfx, dataKey(st.stack[0], ino, from), true, func(k, _ []byte) (bool, error) {
		keys = append(keys, append([]byte(nil), k...))
		return limit <= 0 || len(keys) < limit, nil
	})
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if err := tx.Delete(k); err != nil {
			return false, err
		}
	}
	return limit > 0 && len(keys) == limit, nil
}

func (f *View) remove(dir InodeID, name string, isDir bool) error {
	op := "remove"
	if isDir {
		op = "rmdir"
	}
	if name == "." {
		return pathErr(op, name, syscall.EINVAL)
	}
	if name == ".." {
		return pathErr(op, name, syscall.ENOTEMPTY)
	}
	if e := CheckName(name); e != 0 {
		return pathErr(op, name, e)
	}
	var left []leftData
	err := f.nsUpdate(op, name, func(tx kv.Txn, st state, mk *dirMark) error {
		left = left[:0]
		d, err := f.dirForWrite(tx, st, dir)
		if err != nil {
			return err
		}
		en, s, err := f.findEntry(tx, st, dir, name)
		if err != nil {
			return err
		}
		n, err := f.inodeForWrite(tx, st, en.Ino)
		if err != nil {
			return err
		}
		if isDir && n.Type != TypeDir {
			return syscall.ENOTDIR
		}
		if !isDir && n.Type == TypeDir {
			return syscall.EISDIR
		}
		if n.Type == TypeDir {
			if empty, err := f.dirEmpty(st, n.Ino); err != nil {
				return err
			} else if !empty {
				return syscall.ENOTEMPTY
			}
			d.Nlink--
		}
		if err := f.clearEntry(tx, st, dir, s); err != nil {
			return err
		}
		ts := now()
		d.Mtime, d.Ctime = ts, ts
		if err := f.put(tx, st, d); err != nil {
			return err
		}
		mk.set(d)
		return f.dropLink(tx, st, n, dir, en.Name, &left)
	})
	if err == nil {
		f.purgeLeft(left)
	}
	return err
}

// dirEmpty reports whether dir lists no entry. It reads in a transaction
// of its own, not the caller's update: a directory whose inherited
// entries were removed holds a whiteout for each, any number of keys to
// read past, more than an update may read on etcd (each key read is a
// compare there). The caller holds nsMu, so no entry of the view changes
// in between.
func (f *View) dirEmpty(st state, dir InodeID) (bool, error) {
	empty := false
	err := f.store.View(f.ctx, func(tx kv.Txn) error {
		ents, _, err := f.listLocked(tx, st, dir, 0, 1)
		empty = len(ents) == 0
		return err
	})
	return empty, err
}

// isAncestor reports whether a is dir or one of its ancestors.
func (f *View) isAncestor(tx kv.Txn, st state, a, dir InodeID) (bool, error) {
	for i := 0; i < 4096; i++ {
		if dir == a {
			return true, nil
		}
		if dir == RootIno {
			return false, nil
		}
		n, _, err := f.getInode(tx, st, dir)
		if err != nil {
			return false, err
		}
		if len(n.Links) == 0 {
			return false, nil
		}
		dir = n.Links[0].Dir
	}
	return false, syscall.ELOOP
}

func (f *View) rename(srcDir InodeID, srcName string, dstDir InodeID, dstName string) error {
	for _, nm := range []string{srcName, dstName} {
		if e := CheckName(nm); e != 0 {
			return pathErr("rename", nm, e)
		}
	}
	var left []leftData
	err := f.nsUpdate("rename", srcName, func(tx kv.Txn, st state, mk *dirMark) error {
		left = left[:0]
		sd, err := f.dirForWrite(tx, st, srcDir)
		if err != nil {
			return err
		}
		se, ss, err := f.findEntry(tx, st, srcDir, srcName)
		if err != nil {
			return err
		}
		dd := sd
		if dstDir != srcDir {
			if dd, err = f.dirForWrite(tx, st, dstDir); err != nil {
				return err
			}
		}
		n, err := f.inodeForWrite(tx, st, se.Ino)
		if err != nil {
			return err
		}
		if n.Type == TypeDir && dstDir != srcDir {
			if in, err := f.isAncestor(tx, st, n.Ino, dstDir); err != nil {
				return err
			} else if in {
				return syscall.EINVAL
			}
		}
		de, ds, err := f.findEntry(tx, st, dstDir, dstName)
		switch {
		case err == nil:
			if de.Ino == se.Ino {
				if ds == ss && srcDir == dstDir && de.Name != dstName {
					// The other Unicode form of the same name: store
					// the new spelling, as APFS does.
					return f.respell(tx, st, sd, ss, se, dstName, mk)
				}
				return nil // same file: POSIX says do nothing
			}
			old, err := f.inodeForWrite(tx, st, de.Ino)
			if err != nil {
				return err
			}
			if n.Type == TypeDir && old.Type != TypeDir {
				return syscall.ENOTDIR
			}
			if n.Type != TypeDir && old.Type == TypeDir {
				return syscall.EISDIR
			}
			if old.Type == TypeDir {
				if empty, err := f.dirEmpty(st, old.Ino); err != nil {
					return err
				} else if !empty {
					return syscall.ENOTEMPTY
				}
				dd.Nlink--
			}
			if err := f.dropLink(tx, st, old, dstDir, de.Name, &left); err != nil {
				return err
			}
		case !errors.Is(err, syscall.ENOENT):
			return err
		}
		// The new entry first: in the same directory it may sit right
		// after the old one on a probe chain, and clearEntry must see it
		// to leave a whiteout rather than cut the chain.
		if err := f.setEntry(tx, st, dstDir, ds, entry{Ino: n.Ino, Type: n.Type, Name: dstName}); err != nil {
			return err
		}
		if err := f.clearEntry(tx, st, srcDir, ss); err != nil {
			return err
		}
		for i, l := range n.Links {
			if l.Dir == srcDir && l.Name == se.Name {
				n.Links[i] = link{dstDir, dstName}
				break
			}
		}
		ts := now()
		n.Ctime = ts
		sd.Mtime, sd.Ctime = ts, ts
		if n.Type == TypeDir && dstDir != srcDir {
			sd.Nlink--
			dd.Nlink++
		}
		if dd != sd {
			dd.Mtime, dd.Ctime = ts, ts
			if err := f.put(tx, st, dd); err != nil {
				return err
			}
		}
		if err := f.put(tx, st, sd); err != nil {
			return err
		}
		mk.set(sd)
		return f.put(tx, st, n)
	})
	if err == nil {
		f.purgeLeft(left)
	}
	return err
}

// respell stores entry e of directory d at slot s under name, another
// spelling of the same name, in the entry and in its inode's link.
func (f *View) respell(tx kv.Txn, st state, d *inode, s uint64, e entry, name string, mk *dirMark) error {
	n, err := f.inodeForWrite(tx, st, e.Ino)
	if err != nil {
		return err
	}
	if err := f.setEntry(tx, st, d.Ino, s, entry{Ino: e.Ino, Type: e.Type, Name: name}); err != nil {
		return err
	}
	for i, l := range n.Links {
		if l.Dir == d.Ino && l.Name == e.Name {
			n.Links[i].Name = name
			break
		}
	}
	ts := now()
	n.Ctime = ts
	d.Mtime, d.Ctime = ts, ts
	if err := f.put(tx, st, d); err != nil {
		return err
	}
	mk.set(d)
	return f.put(tx, st, n)
}

func (f *View) readlink(ino InodeID) (string, error) {
	var t string
	err := f.view(func(tx kv.Txn, st state) error {
		n, err := f.known(tx, st, ino)
		if err != nil {
			return err
		}
		if n.Type != TypeSymlink {
			return syscall.EINVAL
		}
		t = n.Target
		return nil
	})
	return t, f.wrap("readlink", "", err)
}

func (f *View) readDir(dir InodeID, cookie uint64, n int) ([]DirEntry, bool, error) {
	var out []DirEntry
	var eof bool
	err := f.view(func(tx kv.Txn, st state) error {
		d, err := f.known(tx, st, dir)
		if err != nil {
			return err
		}
		if d.Type != TypeDir {
			return syscall.ENOTDIR
		}
		out, eof, err = f.listLocked(tx, st, dir, cookie, n)
		return err
	})
	return out, eof, f.wrap("readdir", "", err)
}

// listLocked merges the entries of dir across the layers holding it, in
// slot order after cookie, skipping whiteouts; at most n entries.
func (f *View) listLocked(tx kv.Txn, st state, dir InodeID, cookie uint64, n int) ([]DirEntry, bool, error) {
	if n <= 0 {
		n = 1
	}
	layers, err := f.layersOf(tx, st, dir)
	if err != nil {
		return nil, false, err
	}
	from := cookie + 1
	if from < firstSlot {
		from = firstSlot
	}
	var out []DirEntry
	batch := n + 1
	for {
		type rec struct {
			slot uint64
			rank int
			e    entry
		}
		var recs []rec
		bound := uint64(1<<64 - 1)
		for rank, l := range layers {
			cnt := 0
			var last uint64
			pfx := entryPrefix(l, dir)
			err := tx.Iterate(pfx, u64(append([]byte(nil), pfx...), from), false, func(k, v []byte) (bool, error) {
				e, err := decodeEntry(v)
				if err != nil {
					return false, err
				}
				last = slotOf(k)
				recs = append(recs, rec{last, rank, e})
				cnt++
				return cnt < batch, nil
			})
			if err != nil {
				return nil, false, err
			}
			if cnt == batch && last < bound {
				bound = last
			}
		}
		sort.Slice(recs, func(i, j int) bool {
			if recs[i].slot != recs[j].slot {
				return recs[i].slot < recs[j].slot
			}
			return recs[i].rank < recs[j].rank
		})
		for i, r := range recs {
			if r.slot > bound {
				break
			}
			if i > 0 && recs[i-1].slot == r.slot {
				continue // hidden by an upper layer
			}
			if r.e.Ino == 0 {
				continue
			}
			if len(out) == n {
				return out, false, nil
			}
			out = append(out, DirEntry{Name: r.e.Name, Ino: r.e.Ino, Type: r.e.Type, Cookie: r.slot})
		}
		if bound == 1<<64-1 {
			return out, true, nil
		}
		from = bound + 1
		batch *= 2
	}
}

// pathOf returns the path of ino from the root, through each inode's first
// link; ESTALE for an inode that is gone or no longer linked.
func (f *View) pathOf(ino InodeID) (string, error) {
	var p string
	err := f.view(func(tx kv.Txn, st state) error {
		var err error
		p, err = f.pathInTx(tx, st, ino)
		return err
	})
	if errors.Is(err, syscall.ENOENT) {
		err = syscall.ESTALE
	}
	if err != nil {
		return "", f.wrap("path", "", err)
	}
	return p, nil
}

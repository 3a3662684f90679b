package cowfs

import (
	"context"
	"errors"
	"path"
	"sort"
	"syscall"

	"github.com/branchnfs/branchnfs/kv"
)

// Merge applies what child changed since base onto parent, writing the
// result into layer dst, an empty layer over parent's top that nothing
// references yet. Both sides' changes are deltas above base; a key changed
// on both sides is a conflict, except directories whose only common change
// is their entry list (merged) and paths ignore accepts (the child wins;
// ignore is given paths relative to the root, '/'-separated).
// On conflict it returns the conflicting paths and writes nothing;
// otherwise it returns how many entries and files it applied. The
// caller publishes dst (makes it parent's top) in one small transaction, so
// a crash before that leaves only an unreferenced layer.
//
// cs, ps and bs are the child's, parent's and base's stacks (top first).
// Merge takes no view locks, so callers may hold them.
func (s *Store) Merge(ctx context.Context, cs, ps, bs []LayerID, dst LayerID, ignore func(string) bool) ([]string, int, error) {
	return s.merge(ctx, cs, ps, bs, dst, ignore, false)
}

// MergeKeepSilly is Merge for changes that stay in use, such as what a
// parent wrote while a commit merged into it: silly-renamed files are
// kept, because the clients that renamed them still have them open.
func (s *Store) MergeKeepSilly(ctx context.Context, cs, ps, bs []LayerID, dst LayerID, ignore func(string) bool) ([]string, int, error) {
	return s.merge(ctx, cs, ps, bs, dst, ignore, true)
}

func (s *Store) merge(ctx context.Context, cs, ps, bs []LayerID, dst LayerID, ignore func(string) bool, keepSilly bool) ([]string, int, error) {
	child, parent, base := s.View(cs), s.View(ps), s.View(bs)
	defer child.Close()
	defer parent.Close()
	defer base.Close()
	cl, ok := above(cs, bs)
	if !ok {
		return nil, 0, errors.New("cowfs: merge base is not below the child")
	}
	// The parent's changes relative to base: what the parent's layers and
	// base's layers hold above their common ancestor (they differ when the
	// parent was restored to a checkpoint after the fork). Keys in that set
	// are compared by the parent's visible values below.
	k := commonSuffix(ps, bs)
	if k == 0 {
		return nil, 0, errors.New("cowfs: merge of unrelated trees")
	}
	pl := append(append([]LayerID(nil), ps[:len(ps)-k]...), bs[:len(bs)-k]...)
	type kvp struct{ k, v []byte }
	var writes []kvp
	var conflicts []string
	applied := 0
	ts := now() // the commit time
	err := child.store.View(ctx, func(tx kv.Txn) error {
		writes, conflicts = writes[:0], conflicts[:0]
		cd, err := loadDelta(tx, cl)
		if err != nil {
			return err
		}
		pd, err := loadDelta(tx, pl)
		if err != nil {
			return err
		}
		cst, pst, bst := state{stack: cs}, state{stack: ps}, state{stack: bs}
		var silly []entryID
		if !keepSilly {
			if silly, err = dropSilly(tx, cd, base, bst); err != nil {
				return err
			}
		}
		nameOf := func(n *inode, f *View, st state) string {
			if p, err := f.pathInTx(tx, st, n.Ino); err == nil {
				return p
			}
			if len(n.Links) > 0 {
				return n.Links[0].Name
			}
			return "?"
		}
		// ignore is given paths (nameOf's, so a name where there is no
		// path).
		ignored := func(n *inode, f *View, st state) bool {
			return ignore != nil && len(n.Links) > 0 && ignore(nameOf(n, f, st))
		}
		// Inodes.
		fullCopy := map[InodeID]bool{}
		inos := make([]InodeID, 0, len(cd.inodes))
		for ino := range cd.inodes {
			inos = append(inos, ino)
		}
		sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
		for _, ino := range inos {
			cn := cd.inodes[ino]
			if _, both := pd.inodes[ino]; !both {
				continue
			}
			pn, _, err := parent.getInode(tx, pst, ino)
			if errors.Is(err, syscall.ENOENT) {
				pn = &inode{Ino: ino, Type: cn.Type, Deleted: true}
			} else if err != nil {
				return err
			}
			if cn.Type == TypeDir && pn.Type == TypeDir && !cn.Deleted && !pn.Deleted {
				bn, _, err := base.getInode(tx, bst, ino)
				if err != nil {
					conflicts = append(conflicts, nameOf(cn, child, cst))
					continue
				}
				cAttr := cn.Mode != bn.Mode || cn.UID != bn.UID || cn.GID != bn.GID
				pAttr := pn.Mode != bn.Mode || pn.UID != bn.UID || pn.GID != bn.GID
				cMoved, pMoved := !sameLinks(cn.Links, bn.Links), !sameLinks(pn.Links, bn.Links)
				if cAttr && pAttr || cMoved && pMoved && !sameLinks(cn.Links, pn.Links) {
					conflicts = append(conflicts, nameOf(cn, child, cst))
					continue
				}
				m := pn.clone()
				if cAttr {
					m.Mode, m.UID, m.GID = cn.Mode, cn.UID, cn.GID
				}
				m.Mtime, m.Ctime = max(pn.Mtime, cn.Mtime), max(pn.Ctime, cn.Ctime)
				m.Nlink = uint32(int64(pn.Nlink) + int64(cn.Nlink) - int64(bn.Nlink))
				if cMoved {
					m.Links = cn.Links // the child moved it
				}
				cd.inodes[ino] = m
				continue
			}
			if ignored(cn, child, cst) || ignored(pn, parent, pst) {
				fullCopy[ino] = true
				continue
			}
			conflicts = append(conflicts, nameOf(cn, child, cst))
		}
		// Entries.
		for id, ce := range cd.entries {
			if _, both := pd.entries[id]; !both {
				continue
			}
			pr, err := parent.resolveEntry(tx, pst, id)
			if err != nil {
				return err
			}
			pe := pr.e // zero (a whiteout) when the parent has nothing there
			if pe == ce {
				continue
			}
			dir := "?"
			if p, err := child.pathInTx(tx, cst, id.Dir); err == nil {
				dir = p
			} else if p, err := parent.pathInTx(tx, pst, id.Dir); err == nil {
				dir = p
			}
			if ignore != nil && (ce.Name != "" && ignore(path.Join(dir, ce.Name)) || pe.Name != "" && ignore(path.Join(dir, pe.Name))) {
				continue
			}
			name := ce.Name
			if ce.Ino == 0 {
				name = pe.Name
			}
			conflicts = append(conflicts, path.Join(dir, name))
		}
		if len(conflicts) == 0 {
			// Directories moved on both sides may now contain each other.
			if c := mergedCycle(tx, parent, pst, base, bst, cd, pd); c != "" {
				conflicts = append(conflicts, c)
			}
		}
		if len(conflicts) > 0 {
			return nil
		}
		// Where a silly entry was dropped, keep whatever the parent has;
		// where it has nothing, a whiteout keeps the child's probe chains
		// that ran through the slot intact.
		for _, id := range silly {
			pr, err := parent.resolveEntry(tx, pst, id)
			if err != nil {
				return err
			}
			if !pr.found {
				writes = append(writes, kvp{entryKey(dst, id.Dir, id.Slot), entry{}.encode()})
			}
		}
		named := map[InodeID]bool{}
		listed := map[InodeID]bool{} // directories whose entries change
		for id, ce := range cd.entries {
			writes = append(writes, kvp{entryKey(dst, id.Dir, id.Slot), ce.encode()})
			named[ce.Ino] = true
			listed[id.Dir] = true
			applied++
		}
		// A directory whose listing the merge changes gets the commit
		// time as mtime and ctime: clients (macOS's above all) drop their
		// cached names and negative lookups only when a directory's
		// mtime differs from what they saw, and either side's own time
		// may be exactly that.
		for dir := range listed {
			if _, ok := cd.inodes[dir]; ok {
				continue
			}
			n, _, err := parent.getInode(tx, pst, dir)
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			if err != nil {
				return err
			}
			cd.inodes[dir] = n
			inos = append(inos, dir)
		}
		for dir := range listed {
			if n := cd.inodes[dir]; !n.Deleted {
				n.Mtime, n.Ctime = ts, ts
			}
		}
		for ino, n := range cd.inodes {
			if n.Type != TypeDir && !named[ino] {
				applied++ // changed in place
			}
		}
		for _, ino := range inos {
			cn := cd.inodes[ino]
			if fullCopy[ino] && !cn.Deleted {
				kvs, err := child.fullBlocks(tx, cst, ino, dst)
				if err != nil {
					return err
				}
				for _, e := range kvs {
					writes = append(writes, kvp{e[0], e[1]})
				}
				m := cn.clone()
				m.Cut = 0
				m.Stale, m.StaleFrom = false, 0 // dst holds no leftovers
				writes = append(writes, kvp{inodeKey(dst, ino), m.encode()})
				continue
			}
			m := cn.clone()
			// collapseBlocks leaves a truncate's leftovers behind.
			m.Stale, m.StaleFrom = false, 0
			if !cn.Deleted && cd.data[ino] {
				kvs, cut, err := child.collapseBlocks(tx, cl, ino, dst)
				if err != nil {
					return err
				}
				for _, e := range kvs {
					writes = append(writes, kvp{e[0], e[1]})
				}
				m.Cut = cut
			} else if !cn.Deleted {
				m.Cut = minCut(tx, cl, ino, cn.Cut)
			}
			writes = append(writes, kvp{inodeKey(dst, ino), m.encode()})
		}
		return nil
	})
	if err != nil || len(conflicts) > 0 {
		sort.Strings(conflicts)
		return conflicts, 0, err
	}
	lim := s.limits()
	for i := 0; i < len(writes); {
		j := i + writeBatch(lim, len(writes)-i, func(k int) int { return len(writes[i+k].k) + len(writes[i+k].v) })
		// Content written here must survive a concurrent block sweep
		// until the batch holding its reference commits.
		err := child.updateRefs(ctx, []LayerID{dst}, func(tx kv.Txn, refs *refLog) error {
			for _, w := range writes[i:j] {
				var err error
				switch {
				case len(w.k) == 33 && w.k[0] == pfxContent:
					refs.content(w.k[1:])
					err = child.s.setContent(ctx, tx, w.k[1:], w.v)
				case isDataKey(w.k):
					err = refs.set(tx, w.k, w.v)
				default:
					err = tx.Set(w.k, w.v)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
		i = j
	}
	return nil, applied, nil
}

// dropSilly removes the child's silly-rename entries from delta cd, so a
// merge never publishes them, and returns their slots. An inode that loses
// its last name that way counts as deleted by the child (a tombstone if
// base has it, else nothing at all), as the client's final REMOVE would
// have made it.
func dropSilly(tx kv.Txn, cd *delta, base *View, bst state) ([]entryID, error) {
	var slots []entryID
	inos := map[InodeID]bool{}
	for id, e := range cd.entries {
		if e.Ino != 0 && e.Type != TypeDir && IsSillyName(e.Name) {
			slots = append(slots, id)
			inos[e.Ino] = true
			delete(cd.entries, id)
		}
	}
	for ino := range inos {
		n, ok := cd.inodes[ino]
		if !ok || n.Deleted {
			continue
		}
		m := n.clone()
		m.Links = m.Links[:0]
		for _, l := range n.Links {
			if !IsSillyName(l.Name) {
				m.Links = append(m.Links, l)
			}
		}
		m.Nlink = uint32(len(m.Links))
		if len(m.Links) > 0 {
			cd.inodes[ino] = m
			continue
		}
		delete(cd.data, ino)
		switch _, _, err := base.getInode(tx, bst, ino); {
		case err == nil:
			cd.inodes[ino] = &inode{Ino: ino, Gen: n.Gen, Type: n.Type, Deleted: true}
		case errors.Is(err, syscall.ENOENT):
			delete(cd.inodes, ino)
		default:
			return nil, err
		}
	}
	return slots, nil
}

// resolveEntry resolves directory slot id through stack st of f.
func (f *View) resolveEntry(tx kv.Txn, st state, id entryID) (slotRec, error) {
	layers, err := f.layersOf(tx, st, id.Dir)
	if err != nil {
		return slotRec{}, err
	}
	return resolveSlot(tx, layers, id.Dir, id.Slot)
}

// minCut returns the smallest Cut among the records of ino in layers.
func minCut(tx kv.Txn, layers []LayerID, ino InodeID, cut uint64) uint64 {
	for _, l := range layers {
		v, err := tx.Get(inodeKey(l, ino))
		if err != nil {
			continue
		}
		if n, err := decodeInode(ino, v); err == nil && n.Cut < cut {
			cut = n.Cut
		}
	}
	return cut
}

// collapseBlocks folds the blocks of ino held by layers (top first) into
// references for layer dst, honouring each record's Cut, and returns them
// with the folded Cut (relative to what lies below layers).
func (f *View) collapseBlocks(tx kv.Txn, layers []LayerID, ino InodeID, dst LayerID) ([][2][]byte, uint64, error) {
	var out [][2][]byte
	seen := map[uint64]bool{}
	limit := uint64(1<<64 - 1)
	br := &blockReader{f: f, tx: tx, ino: ino}
	for _, l := range layers {
		pfx := dataPrefix(l, ino)
		n, err := layerInode(tx, l, ino)
		if err != nil {
			return nil, 0, err
		}
		stale := uint64(1<<64 - 1) // the layer's leftovers of a truncate start there
		if n != nil && n.Stale {
			stale = n.StaleFrom
		}
		var inner error
		// one adds block idx with reference ref, unless found already;
		// it reports whether the layer's blocks go on.
		one := func(idx uint64, ref []byte) bool {
			if idx >= stale {
				return false
			}
			if seen[idx] {
				return true
			}
			base := idx * f.bs
			if base >= limit {
				return false
			}
			seen[idx] = true
			ref = append([]byte(nil), ref...)
			if limit-base < f.bs {
				// Straddles an upper cut: store the visible part only.
				buf := make([]byte, f.bs)
				if inner = br.content(resolved{ref: ref, limit: limit - base}, buf); inner != nil {
					return false
				}
				var c *[2][]byte
				ref, c = f.blockRef(buf[:limit-base])
				if c != nil {
					out = append(out, *c)
				}
			}
			out = append(out, [2][]byte{dataKey(dst, ino, idx), ref})
			return true
		}
		err = tx.Iterate(pfx, nil, false, func(k, v []byte) (bool, error) {
			if isExtentKey(k) {
				// One reference per block: the blocks a layer's own
				// references cover were seen first.
				e, err := decodeExtent(keyBlock(k), v, f.bs)
				if err != nil {
					return false, err
				}
				more := true
				if err := e.blockRefs(f.bs, 0, e.last, func(idx uint64, ref []byte) bool { more = one(idx, ref); return more }); err != nil {
					return false, err
				}
				return more && inner == nil, inner
			}
			return one(keyBlock(k), v) && inner == nil, inner
		})
		if err != nil {
			return nil, 0, err
		}
		if n == nil {
			continue
		}
		if n.Deleted {
			limit = 0
		} else if n.Cut < limit {
			limit = n.Cut
		}
		if limit == 0 {
			break
		}
	}
	return out, limit, nil
}

// fullBlocks returns references for every visible block of ino in view st,
// for a record with Cut 0 in layer dst.
func (f *View) fullBlocks(tx kv.Txn, st state, ino InodeID, dst LayerID) ([][2][]byte, error) {
	n, _, err := f.getInode(tx, st, ino)
	if err != nil || n.Size == 0 {
		return nil, err
	}
	br, err := f.newBlockReader(tx, st, ino)
	if err != nil {
		return nil, err
	}
	blocks, err := br.blocks(0, (n.Size-1)/f.bs)
	if err != nil {
		return nil, err
	}
	var out [][2][]byte
	for idx, r := range blocks {
		ref := r.ref
		if r.limit < f.bs {
			buf := make([]byte, f.bs)
			if err := br.content(r, buf); err != nil {
				return nil, err
			}
			var c *[2][]byte
			ref, c = f.blockRef(buf[:r.limit])
			if c != nil {
				out = append(out, *c)
			}
		}
		out = append(out, [2][]byte{dataKey(dst, ino, idx), ref})
	}
	return out, nil
}

// SetStackLocked replaces the stack (top first); the caller holds Lock.
func (f *View) SetStackLocked(stack []LayerID) { f.setStackLocked(append([]LayerID(nil), stack...)) }

// commonSuffix returns how many bottom layers a and b share.
func commonSuffix(a, b []LayerID) int {
	k := 0
	for k < len(a) && k < len(b) && a[len(a)-1-k] == b[len(b)-1-k] {
		k++
	}
	return k
}

func sameLinks(a, b []link) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// mergedCycle checks that every directory the child moved still reaches the
// root once the child's moves are applied over the parent, and returns the
// path of one that would not (a cycle), or "".
func mergedCycle(tx kv.Txn, parent *View, pst state, base *View, bst state, cd, pd *delta) string {
	moved := map[InodeID]InodeID{} // dir -> new parent, child's moves
	for ino, n := range cd.inodes {
		if n.Type != TypeDir || n.Deleted || len(n.Links) == 0 {
			continue
		}
		if bn, _, err := base.getInode(tx, bst, ino); err == nil && sameLinks(bn.Links, n.Links) {
			continue // not moved by the child
		}
		moved[ino] = n.Links[0].Dir
	}
	if len(moved) == 0 || len(pd.inodes) == 0 {
		return ""
	}
	parentOf := func(ino InodeID) (InodeID, bool) {
		if p, ok := moved[ino]; ok {
			return p, true
		}
		n, _, err := parent.getInode(tx, pst, ino)
		if err != nil || len(n.Links) == 0 {
			return 0, false
		}
		return n.Links[0].Dir, true
	}
	for start := range moved {
		seen := map[InodeID]bool{}
		for cur := start; cur != RootIno; {
			if seen[cur] {
				if p, err := parent.pathInTx(tx, pst, start); err == nil {
					return p + " (moved into itself by the two sides' renames)"
				}
				return cd.inodes[start].Links[0].Name + " (moved into itself by the two sides' renames)"
			}
			seen[cur] = true
			p, ok := parentOf(cur)
			if !ok {
				break
			}
			cur = p
		}
	}
	return ""
}

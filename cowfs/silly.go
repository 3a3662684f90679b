package cowfs

import (
	"context"
	"encoding/binary"
	"errors"
	"syscall"

	"github.com/branchnfs/branchnfs/kv"
)

// Silly renames. An NFS client that removes a file one of its processes
// still has open renames it to a hidden name instead, and removes that
// name once the file is closed. Such files belong to no one's work, so a
// commit never publishes them to the parent:
//   - the merge path drops entries with a silly name from the child's
//     delta, and treats an inode left with no other name as deleted;
//   - the fast path (a pointer swap) stays O(1) in the size of the change:
//     every entry write of a silly name also writes a key to the layer's
//     silly index ('l' layer 's' dir slot), so the commit visits only
//     those slots (DropSillyLocked), in O(silly renames).

// IsSillyName reports whether name has the form of an NFS client's silly
// rename: macOS writes ".nfs.%08x.%04x" (a counter, the pid), FreeBSD the
// same with "4.4" appended (sys/nfsclient/nfs_vnops.c), Linux
// ".nfs%016llx%08x" (fileid, counter; fs/nfs/dir.c nfs_sillyrename).
func IsSillyName(name string) bool {
	const pfx = ".nfs"
	if len(name) < len(pfx) || name[:len(pfx)] != pfx {
		return false
	}
	rest := name[len(pfx):]
	if len(rest) == 24 && isHex(rest) {
		return true // Linux
	}
	if len(rest) < 1+8+1+4 || rest[0] != '.' || !isHex(rest[1:9]) || rest[9] != '.' {
		return false
	}
	tail := rest[10:]
	if len(tail) >= 4+3 && tail[len(tail)-3:] == "4.4" {
		tail = tail[:len(tail)-3]
	}
	return len(tail) >= 4 && len(tail) <= 8 && isHex(tail)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// DropSillyLocked removes, inside the caller's transaction, every entry of
// the view that has a silly name and was recorded in the silly index of
// one of layers (the layers a branch added above its fork base), as an
// unlink would, and clears the index keys of the top layer. Inodes left
// without a name are deleted; their blocks in the top layer stay until
// PurgeData (a transaction must stay small), and it returns those inodes.
// The caller holds Lock. Cost: O(index keys of layers).
func (f *View) DropSillyLocked(t *Txn, layers []LayerID) ([]InodeID, error) {
	tx := t.tx
	if f.err != nil {
		return nil, syscall.ESTALE
	}
	st := state{stack: f.stack}
	top := st.stack[0]
	type slotID struct {
		dir  InodeID
		slot uint64
	}
	seen := map[slotID]bool{}
	var clear [][]byte
	var purge []InodeID
	for _, l := range layers {
		pfx := sillyPrefix(l)
		var ids []slotID
		err := tx.Iterate(pfx, nil, true, func(k, _ []byte) (bool, error) {
			if len(k) != len(pfx)+16 {
				return false, errCorrupt
			}
			id := slotID{InodeID(binary.BigEndian.Uint64(k[len(pfx):])), binary.BigEndian.Uint64(k[len(pfx)+8:])}
			if l == top {
				clear = append(clear, append([]byte(nil), k...))
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			gone, err := f.dropSillyEntry(tx, st, id.dir, id.slot)
			if err != nil {
				return nil, err
			}
			if gone != 0 {
				purge = append(purge, gone)
			}
		}
	}
	for _, k := range clear {
		if err := tx.Delete(k); err != nil {
			return nil, err
		}
	}
	return purge, nil
}

// dropSillyEntry unlinks the entry at slot s of dir if it is still a
// non-directory with a silly name. It returns the inode when that was its
// last name (deleted, blocks left for PurgeData).
func (f *View) dropSillyEntry(tx kv.Txn, st state, dir InodeID, s uint64) (InodeID, error) {
	d, _, err := f.getInode(tx, st, dir)
	if errors.Is(err, syscall.ENOENT) {
		return 0, nil // the directory went too
	}
	if err != nil {
		return 0, err
	}
	if d.Type != TypeDir {
		return 0, nil
	}
	layers, err := f.layersOf(tx, st, dir)
	if err != nil {
		return 0, err
	}
	r, err := resolveSlot(tx, layers, dir, s)
	if err != nil {
		return 0, err
	}
	if !r.found || r.e.Ino == 0 || r.e.Type == TypeDir || !IsSillyName(r.e.Name) {
		return 0, nil // removed or renamed since: nothing to drop
	}
	n, _, err := f.getInode(tx, st, r.e.Ino)
	if errors.Is(err, syscall.ENOENT) {
		return 0, f.clearEntry(tx, st, dir, s)
	}
	if err != nil {
		return 0, err
	}
	if err := f.clearEntry(tx, st, dir, s); err != nil {
		return 0, err
	}
	ts := now()
	d.Mtime, d.Ctime = ts, ts
	if err := f.put(tx, st, d); err != nil {
		return 0, err
	}
	for i, l := range n.Links {
		if l.Dir == dir && l.Name == r.e.Name {
			n.Links = append(n.Links[:i:i], n.Links[i+1:]...)
			break
		}
	}
	n.Nlink = uint32(len(n.Links))
	n.Ctime = ts
	if len(n.Links) > 0 {
		return 0, f.put(tx, st, n)
	}
	held, err := f.layersOf(tx, st, n.Ino)
	if err != nil {
		return 0, err
	}
	for _, l := range held {
		if l != st.stack[0] {
			t := &inode{Ino: n.Ino, Gen: n.Gen, Type: n.Type, Deleted: true}
			return n.Ino, f.put(tx, st, t)
		}
	}
	return n.Ino, tx.Delete(inodeKey(st.stack[0], n.Ino))
}

// PurgeData deletes layer l's blocks of inodes that are deleted in l (as
// DropSillyLocked leaves them), in batches of small transactions.
func (s *Store) PurgeData(ctx context.Context, l LayerID, inos []InodeID) error {
	for _, ino := range inos {
		if _, err := deletePrefix(ctx, s.kv, dataPrefix(l, ino)); err != nil {
			return err
		}
	}
	return nil
}

package cowfs

import (
	"context"
	"encoding/binary"
	"errors"
	"path"
	"sort"
	"syscall"

	"github.com/branchnfs/branchnfs/kv"
)

// A delta is what a run of layers (the layers a branch added above its fork
// base) changed: the topmost inode records, directory-entry records and the
// set of inodes with data. Diff and merge work on deltas, so they cost
// O(changes), not O(tree).

type entryID struct {
	Dir  InodeID
	Slot uint64
}

type delta struct {
	layers  []LayerID // top first
	inodes  map[InodeID]*inode
	entries map[entryID]entry
	data    map[InodeID]bool
}

func loadDelta(tx kv.Txn, layers []LayerID) (*delta, error) {
	d := &delta{layers: layers, inodes: map[InodeID]*inode{}, entries: map[entryID]entry{}, data: map[InodeID]bool{}}
	for _, l := range layers {
		pfx := layerPrefix(l)
		err := tx.Iterate(pfx, nil, false, func(k, v []byte) (bool, error) {
			rest := k[len(pfx):]
			switch {
			case len(rest) == 9 && rest[0] == kindInode:
				ino := InodeID(binary.BigEndian.Uint64(rest[1:]))
				if _, ok := d.inodes[ino]; ok {
					return true, nil
				}
				n, err := decodeInode(ino, v)
				if err != nil {
					return false, err
				}
				d.inodes[ino] = n
			case len(rest) == 17 && rest[0] == kindEntry:
				id := entryID{InodeID(binary.BigEndian.Uint64(rest[1:])), binary.BigEndian.Uint64(rest[9:])}
				if _, ok := d.entries[id]; ok {
					return true, nil
				}
				e, err := decodeEntry(v)
				if err != nil {
					return false, err
				}
				d.entries[id] = e
			case (len(rest) == 17 || len(rest) == 18) && rest[0] == kindData:
				d.data[InodeID(binary.BigEndian.Uint64(rest[1:]))] = true
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// dataBytes sums the bytes of the delta's blocks of ino.
func (d *delta) dataBytes(tx kv.Txn, f *View, ino InodeID) (int64, error) {
	var total int64
	seen := map[uint64]bool{}
	for _, l := range d.layers {
		pfx := dataPrefix(l, ino)
		err := tx.Iterate(pfx, nil, false, func(k, v []byte) (bool, error) {
			if isExtentKey(k) {
				e, err := decodeExtent(keyBlock(k), v, f.bs)
				if err != nil {
					return false, err
				}
				err = e.blockRefs(f.bs, 0, e.last, func(idx uint64, ref []byte) bool {
					if !seen[idx] {
						seen[idx] = true
						total += refBytes(ref, f.bs)
					}
					return true
				})
				return err == nil, err
			}
			idx := keyBlock(k)
			if seen[idx] {
				return true, nil
			}
			seen[idx] = true
			total += refBytes(v, f.bs)
			return true, nil
		})
		if err != nil {
			return 0, err
		}
	}
	return total, nil
}

// DeltaBytes returns the data bytes written in layers (an upper bound: full
// blocks count as the block size).
func (s *Store) DeltaBytes(ctx context.Context, stack []LayerID, base LayerID) (int64, error) {
	f := s.View(stack)
	defer f.Close()
	var layers []LayerID
	for _, l := range stack {
		if l == base {
			break
		}
		layers = append(layers, l)
	}
	var total int64
	err := f.store.View(ctx, func(tx kv.Txn) error {
		total = 0
		for _, l := range layers {
			pfx := append(layerPrefix(l), kindData)
			err := tx.Iterate(pfx, nil, false, func(k, v []byte) (bool, error) {
				total += refBytes(v, f.bs)
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return total, err
}

// Change is one changed path.
type Change struct {
	Path  string
	Kind  string // "added", "modified", "deleted"
	Type  FileType
	Bytes int64
}

// Diff lists what the layers of view (those above base, i.e. view's stack
// minus base's) changed relative to the view base. ignore filters paths
// ('/'-separated, relative to the root, as in Change.Path).
func (s *Store) Diff(ctx context.Context, vs, bs []LayerID, ignore func(name string) bool) ([]Change, error) {
	view, base := s.View(vs), s.View(bs)
	defer view.Close()
	defer base.Close()
	layers, ok := above(vs, bs)
	if !ok {
		return nil, errors.New("cowfs: diff base is not below the view")
	}
	var out []Change
	err := view.store.View(ctx, func(tx kv.Txn) error {
		out = out[:0]
		d, err := loadDelta(tx, layers)
		if err != nil {
			return err
		}
		vst, bst := state{stack: vs}, state{stack: bs}
		reported := map[InodeID]bool{}
		ignored := func(p, name string) bool {
			if ignore == nil {
				return false
			}
			if p == "" {
				p = name // no path: the name alone
			}
			return ignore(p)
		}
		pathIn := func(f *View, st state, dir InodeID, name string) string {
			p, err := f.pathInTx(tx, st, dir)
			if err != nil {
				return ""
			}
			return path.Join(p, name)
		}
		for id, ce := range d.entries {
			blayers, err := base.layersOf(tx, bst, id.Dir)
			if err != nil {
				return err
			}
			be, err := resolveSlot(tx, blayers, id.Dir, id.Slot)
			if err != nil {
				return err
			}
			bLive := be.found && be.e.Ino != 0
			cLive := ce.Ino != 0
			if cLive && ce.Type != TypeDir && IsSillyName(ce.Name) {
				continue // never published by a commit (see silly.go)
			}
			switch {
			case cLive && (!bLive || be.e.Ino != ce.Ino):
				kind := "added"
				if bLive && sameName(be.e.Name, foldName(ce.Name)) {
					kind = "modified"
				}
				p := pathIn(view, vst, id.Dir, ce.Name)
				if ignored(p, ce.Name) {
					continue
				}
				var bytes int64
				if n, ok := d.inodes[ce.Ino]; ok && n.Type == TypeRegular {
					if bytes, err = d.dataBytes(tx, view, ce.Ino); err != nil {
						return err
					}
				}
				out = append(out, Change{Path: p, Kind: kind, Type: ce.Type, Bytes: bytes})
				reported[ce.Ino] = true
				if bLive && kind == "added" {
					out = append(out, Change{Path: pathIn(base, bst, id.Dir, be.e.Name), Kind: "deleted", Type: be.e.Type})
				}
			case !cLive && bLive:
				p := pathIn(base, bst, id.Dir, be.e.Name)
				if ignored(p, be.e.Name) {
					continue
				}
				var size int64
				if n, _, err := base.getInode(tx, bst, be.e.Ino); err == nil && n.Type == TypeRegular {
					size = int64(n.Size)
				}
				out = append(out, Change{Path: p, Kind: "deleted", Type: be.e.Type, Bytes: size})
				reported[be.e.Ino] = true
			}
		}
		for ino, n := range d.inodes {
			if reported[ino] || n.Deleted || len(n.Links) == 0 || IsSillyName(n.Links[0].Name) {
				continue
			}
			bn, _, err := base.getInode(tx, bst, ino)
			if err != nil {
				continue // created and removed inside the delta
			}
			changed := n.Mode != bn.Mode || n.UID != bn.UID || n.GID != bn.GID
			if n.Type != TypeDir {
				changed = changed || n.Size != bn.Size || n.Mtime != bn.Mtime || d.data[ino] || n.Target != bn.Target
			}
			if !changed {
				continue
			}
			p, err := view.pathInTx(tx, vst, ino)
			if err != nil || ignored(p, n.Links[0].Name) {
				continue
			}
			var bytes int64
			if n.Type == TypeRegular {
				if bytes, err = d.dataBytes(tx, view, ino); err != nil {
					return err
				}
			}
			out = append(out, Change{Path: p, Kind: "modified", Type: n.Type, Bytes: bytes})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Kind < out[j].Kind
	})
	return out, err
}

// above returns the layers of stack above the top of base, if base's stack
// is a suffix of stack.
func above(stack, base []LayerID) ([]LayerID, bool) {
	if len(base) > len(stack) {
		return nil, false
	}
	k := len(stack) - len(base)
	for i := range base {
		if stack[k+i] != base[i] {
			return nil, false
		}
	}
	return stack[:k], true
}

// pathInTx is pathOf inside a transaction: ESTALE for an inode with no
// link, ELOOP for a chain of links that does not reach the root.
func (f *View) pathInTx(tx kv.Txn, st state, ino InodeID) (string, error) {
	var parts []string
	for cur, i := ino, 0; cur != RootIno; i++ {
		if i > 4096 {
			return "", syscall.ELOOP
		}
		n, _, err := f.getInode(tx, st, cur)
		if err != nil {
			return "", err
		}
		if len(n.Links) == 0 {
			return "", syscall.ESTALE
		}
		parts = append(parts, n.Links[0].Name)
		cur = n.Links[0].Dir
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return path.Join(parts...), nil
}

// refBytes is the data a block reference wrote: inline bytes, a whole
// block for a stored one, the edits of a patch (or of a chunk reference
// carrying edits), the slices' bytes of a rechunked block, nothing for
// zeros.
func refBytes(v []byte, bs uint64) int64 {
	switch {
	case len(v) > 0 && v[0] == refInline:
		return int64(len(v) - 1)
	case len(v) > 0 && v[0] == refHash:
		return int64(bs)
	case len(v) > 33 && v[0] == refPatch:
		return patchBytes(v[33:])
	case len(v) > 0 && v[0] == refChunks:
		// With edits it was written as a patch; without, it is a stored
		// block rechunked.
		if _, edits, ok := chunkRefParts(v); ok && len(edits) > 0 {
			return patchBytes(edits)
		}
		return chunkRefBytes(v)
	case len(v) >= 5 && v[0] == refExtent:
		var n int64
		for sl := v[5:]; len(sl) >= sliceLen; sl = sl[sliceLen:] {
			n += int64(binary.BigEndian.Uint32(sl[36:]))
		}
		return n
	}
	return 0
}

// patchBytes sums the edited bytes of a patch reference's edits.
func patchBytes(p []byte) int64 {
	var n int64
	for len(p) >= 8 {
		l := binary.BigEndian.Uint32(p[4:])
		n += int64(l)
		if uint64(len(p)) < 8+uint64(l) {
			break
		}
		p = p[8+l:]
	}
	return n
}

package cowfs

import (
	"encoding/binary"

	"github.com/branchnfs/branchnfs/kv"
)

// The top-layer cache. A view's top layer changes under every write, so
// the frozen-reference cache (readcache.go) leaves it out, and a READ
// reads the top layer's record of the inode and its block references
// for the range from the store: one request on etcd even when all else
// is cached. But every change of a top layer goes through this Store
// when nothing else writes it: the view's own writes (View.write),
// merges (updateRefs), rechunks and coalesces (swapRefs), and the
// reclaimer's DeleteLayer. That is so on a store of the process's own (Badger), and
// on a shared store for a branch this server owns (Options.Shared,
// SetReadOnly(false)): another server then neither writes it nor merges
// into it (docs/design.md, "Branch ownership"). Each of those changes
// but a rechunk or coalesce (which keep the bytes, as for the frozen
// layers: readcache.go) counts as a change of the layer in the
// frozenCache (begin and end), so an entry of the top layer kept under
// the same rules as the frozen ones
// (filled only if the layer had no change running or ended since the
// READ began, used only while it has had none since) holds what the
// store holds. A warm READ of a file a view holds in its top then reads
// nothing from the store but content: no request at all on etcd when
// the content is in the block cache.
//
// What another server may still do to a layer this one owns is swap its
// references for others to the same bytes (its GC's rechunk) and then
// sweep the old content, as this server's own GC may: a READ that finds
// content missing drops the caches and reads again, as for frozen
// layers (readInto).
// A branch this server stops owning (its lease lost, SetReadOnly(true))
// reads from the store until it owns it again, and owning it again
// voids what was cached before (ownedAt), since another server may have
// written it meanwhile.
//
// An entry is keyed by the layer and the inode (topKey), so every view
// whose top it is shares it; it holds the layer's decoded record and,
// per group of cacheGroup blocks, the references the layer itself holds,
// limited by nothing (the record's cut limits the layers below).

// topKey is the cache key of ino in top layer l: 17 bytes, which no
// frozenKey (a multiple of 8) is.
func topKey(l LayerID, ino InodeID) string {
	b := make([]byte, 0, 17)
	b = append(b, 't')
	b = binary.BigEndian.AppendUint64(b, uint64(l))
	b = binary.BigEndian.AppendUint64(b, uint64(ino))
	return string(b)
}

// exclusive reports whether only this Store writes the view's top layer:
// always on a store of its own, on a shared one while this server owns
// the branch.
func (f *View) exclusive() bool { return !f.opts.Shared || f.owned.Load() }

// topGen returns the generation under which a READ about to begin may
// use and fill the top-layer cache (ok false: it may not).
func (f *View) topGen(rg readGen) readGen {
	if !rg.ok || !f.exclusive() {
		return readGen{}
	}
	return rg
}

// topEntry returns the cached entry of ino in top layer l, nil when
// there is none that tg may use.
func (f *View) topEntry(l LayerID, ino InodeID, tg readGen) *frozenData {
	if !tg.ok {
		return nil
	}
	c := f.s.frozen
	key := topKey(l, ino)
	c.mu.Lock()
	defer c.mu.Unlock()
	td, ok := c.entries[key]
	if !ok || td.at < f.ownedAt.Load() || !c.stableLocked(td.stack, td.at) {
		return nil
	}
	return td
}

// fillTop makes the entry of ino in top layer l, whose record the READ
// under tg read (rec, nil if the layer holds none), and caches it if no
// change of l ran since the READ began. The READ uses it either way.
func (f *View) fillTop(l LayerID, ino InodeID, rec *inode, tg readGen) *frozenData {
	td := &frozenData{key: topKey(l, ino), stack: []LayerID{l}, at: tg.at, rec: rec, groups: map[uint64][]resolved{}}
	if rec != nil {
		cut := rec.Cut
		if rec.Deleted {
			cut = 0
		}
		td.layers, td.cuts = td.stack, []uint64{cut}
	}
	c := f.s.frozen
	c.mu.Lock()
	defer c.mu.Unlock()
	if tg.at < f.ownedAt.Load() || !c.stableLocked(td.stack, tg.at) {
		return td // keep it to this READ
	}
	c.putLocked(td)
	return td
}

// topRecord returns top layer l's record of ino (nil if it holds none)
// for a read-only request under tg: from the layer's cache entry, or read
// and cached. GETATTR, ACCESS and READDIRPLUS read attributes this way:
// the same record a READ takes its size and reply attributes from.
func (f *View) topRecord(tx kv.Txn, l LayerID, ino InodeID, tg readGen) (*inode, error) {
	if td := f.topEntry(l, ino, tg); td != nil {
		return td.rec, nil
	}
	rec, err := layerInode(tx, l, ino)
	if err == nil && tg.ok {
		f.fillTop(l, ino, rec, tg)
	}
	return rec, err
}

// hasGroups reports whether td holds the references of blocks [first,
// last] (all of them when its layer holds no record of the inode).
func (f *View) hasGroups(td *frozenData, first, last uint64) bool {
	if len(td.layers) == 0 {
		return true
	}
	c := f.s.frozen
	c.mu.Lock()
	defer c.mu.Unlock()
	for g := first / cacheGroup; g <= last/cacheGroup; g++ {
		if _, ok := td.groups[g]; !ok {
			return false
		}
	}
	return true
}

// prefetchRead asks a store reached over the network (kv.Prefetcher) for
// what a READ of blocks [first, last] of ino is about to read of the top
// layer, in one request: its record, when record is set, and its block
// references from the first block on, as many as the READ spans and the
// next, where its iteration stops. With groups set the references come
// a group of cacheGroup blocks at a time, from each group's first block,
// as the top-layer cache reads them.
func prefetchRead(tx kv.Txn, top LayerID, ino InodeID, first, last uint64, record, groups bool) error {
	p, ok := tx.(kv.Prefetcher)
	if !ok {
		return nil
	}
	var keys [][]byte
	if record {
		keys = [][]byte{inodeKey(top, ino)}
	}
	pfx := dataPrefix(top, ino)
	var rngs []kv.IterRange
	if !groups {
		rngs = []kv.IterRange{{Prefix: pfx, Start: u64(append([]byte(nil), pfx...), first), Limit: int(min(last-first+2, 1<<20))}}
	} else {
		for g := first / cacheGroup; g <= min(last/cacheGroup, first/cacheGroup+3); g++ {
			rngs = append(rngs, kv.IterRange{Prefix: pfx, Start: u64(append([]byte(nil), pfx...), g*cacheGroup), Limit: cacheGroup + 1})
		}
	}
	return p.Prefetch(keys, rngs)
}

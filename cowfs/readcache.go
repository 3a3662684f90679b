package cowfs

import (
	"bytes"

	"github.com/branchnfs/branchnfs/kv"
)

// The frozen-reference cache. A layer below a view's top never changes what
// it shows while the view's stack stays (fs.go, the inode cache's
// invariant): fold and prune delete only references an upper layer
// shadows, or copy a layer into the one below it while the upper one stays
// in every stack holding the lower. So the block references a READ
// resolves through the frozen layers can be kept, per view, until the
// stack changes, and a READ of frozen data then reads only the top layer's
// record and references (none when the top holds no record of the inode).
//
// Store-level changes of references that keep the bytes but not the
// references (rechunk and coalesce swap a block's reference for chunk
// slices; the old content may then be swept) go through Store.updateRefs,
// which counts them in refBusy while they run and moves refGen when they
// end: a view uses its cache only while refBusy is zero and refGen is the
// value it was filled under, and fills it only if neither moved since the
// READ began (so the READ's snapshot is at least as new as the last such
// change).

// cacheGroup is how many consecutive blocks are resolved and cached
// together: one key iteration per frozen layer fills 2 MiB of 32 KiB
// blocks.
const cacheGroup = 64

// frozenData is what the frozen layers of a stack hold of one inode's
// data. layers and cuts are read only; groups is guarded by the view's
// cacheMu, its slices read only once stored.
type frozenData struct {
	layers []LayerID // frozen layers holding a record, top first, down to the first with cut 0
	cuts   []uint64  // their records' Cut; 0 for a tombstone
	// groups maps group g to the resolved references of blocks
	// [g*cacheGroup, (g+1)*cacheGroup), a nil ref for a hole, with limits
	// from the frozen layers' cuts alone.
	groups map[uint64][]resolved
}

// readGen is the Store's reference generation a READ began under.
type readGen struct {
	gen uint64
	ok  bool // the cache may be used: enabled and no reference change running
}

// readGen returns the generation for a READ about to begin.
func (f *View) readGen() readGen {
	if f.opts.BlockCacheBytes < 0 {
		return readGen{}
	}
	busy := f.s.refBusy.Load()
	return readGen{gen: f.s.refGen.Load(), ok: busy == 0}
}

// canFill reports whether what a READ begun under rg read may be cached.
func (f *View) canFill(rg readGen) bool {
	return f.s.refBusy.Load() == 0 && f.s.refGen.Load() == rg.gen
}

// newReadBlockReader is newBlockReader for a READ of an inode whose top
// layer's record the caller read (top, nil if that layer holds none): the
// frozen layers come from the cache (filled on a miss), and only the top
// layer's references are read.
func (f *View) newReadBlockReader(tx kv.Txn, st state, ino InodeID, top *inode, rg readGen) (*blockReader, error) {
	if !rg.ok || len(st.stack) < 2 {
		return f.newBlockReader(tx, st, ino)
	}
	br := &blockReader{f: f, tx: tx, ino: ino}
	if top != nil {
		cut := top.Cut
		if top.Deleted {
			cut = 0
		}
		br.layers, br.cuts = []LayerID{st.stack[0]}, []uint64{cut}
		if cut == 0 {
			return br, nil // nothing below is visible
		}
	}
	fd, err := f.frozenDataOf(tx, st, ino, rg)
	if err != nil {
		return nil, err
	}
	br.frozen, br.gen = fd, rg
	return br, nil
}

// frozenDataOf returns the cached frozenData of ino, reading and caching
// it on a miss.
func (f *View) frozenDataOf(tx kv.Txn, st state, ino InodeID, rg readGen) (*frozenData, error) {
	f.cacheMu.Lock()
	if f.blocksGen == rg.gen && f.blocks != nil {
		if fd, ok := f.blocks[ino]; ok {
			f.cacheMu.Unlock()
			return fd, nil
		}
	}
	f.cacheMu.Unlock()
	fr, err := f.frozenOf(tx, st, ino)
	if err != nil {
		return nil, err
	}
	fd := &frozenData{groups: map[uint64][]resolved{}}
	if fd.layers, fd.cuts, err = dataLayers(tx, fr.layers, ino); err != nil {
		return nil, err
	}
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	if !f.canFill(rg) {
		return fd, nil
	}
	size := 96 + 16*len(fd.layers)
	if f.blocks == nil || f.blocksGen != rg.gen || f.blocksBytes+size > f.opts.BlockCacheBytes {
		f.blocks, f.blocksBytes, f.blocksGen = make(map[InodeID]*frozenData, 64), 0, rg.gen
	}
	if old, ok := f.blocks[ino]; ok { // a racing READ filled it
		return old, nil
	}
	f.blocks[ino] = fd
	f.blocksBytes += size
	return fd, nil
}

// frozenGroup returns the frozen layers' references of group g, from the
// cache or resolved and cached.
func (br *blockReader) frozenGroup(g uint64) ([]resolved, error) {
	f, fd := br.f, br.frozen
	f.cacheMu.Lock()
	grp, ok := fd.groups[g]
	f.cacheMu.Unlock()
	if ok {
		return grp, nil
	}
	lo := g * cacheGroup
	grp = make([]resolved, cacheGroup)
	err := br.resolveLayers(fd.layers, fd.cuts, lo, lo+cacheGroup-1,
		func(idx uint64) bool { return grp[idx-lo].ref != nil },
		func(idx uint64, r resolved) {
			r.ref = bytes.Clone(r.ref)
			if r.ref == nil {
				r.ref = []byte{} // found but empty: content reports it corrupt
			}
			grp[idx-lo] = r
		})
	if err != nil {
		return nil, err
	}
	size := 48 + cacheGroup*32
	for _, r := range grp {
		size += len(r.ref)
	}
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	if !f.canFill(br.gen) || f.blocks[br.ino] != fd || f.blocksGen != br.gen.gen {
		return grp, nil // dropped or started over meanwhile: keep it to this READ
	}
	if f.blocksBytes+size > f.opts.BlockCacheBytes {
		f.blocks, f.blocksBytes = make(map[InodeID]*frozenData, 64), 0
		return grp, nil
	}
	if old, ok := fd.groups[g]; ok {
		return old, nil
	}
	fd.groups[g] = grp
	f.blocksBytes += size
	return grp, nil
}

// blockRangeCached is blockRange for a reader with frozen set: the top
// layer's references, then the cached frozen ones it does not shadow,
// limited by the top record's cut.
func (br *blockReader) blockRangeCached(first, last uint64) ([]resolved, error) {
	out := make([]resolved, last-first+1)
	limit := uint64(1<<64 - 1)
	if len(br.layers) > 0 {
		err := br.resolveLayers(br.layers, br.cuts, first, last,
			func(idx uint64) bool { return out[idx-first].ref != nil },
			func(idx uint64, r resolved) {
				if r.ref == nil {
					r.ref = []byte{}
				}
				out[idx-first] = r
			})
		if err != nil {
			return nil, err
		}
		limit = br.cuts[0]
	}
	if len(br.frozen.layers) == 0 {
		return out, nil
	}
	bs := br.f.bs
	for g := first / cacheGroup; g <= last/cacheGroup; g++ {
		grp, err := br.frozenGroup(g)
		if err != nil {
			return nil, err
		}
		lo := g * cacheGroup
		for idx := max(first, lo); idx <= min(last, lo+cacheGroup-1); idx++ {
			r := grp[idx-lo]
			if r.ref == nil || out[idx-first].ref != nil {
				continue
			}
			base := idx * bs
			if base >= limit {
				continue
			}
			r.limit = min(r.limit, limit-base)
			out[idx-first] = r
		}
	}
	return out, nil
}

package cowfs

import (
	"bytes"
	"encoding/binary"
	"sync"

	"github.com/branchnfs/branchnfs/kv"
)

// The frozen-reference cache. A layer below a view's top never changes what
// it shows while it stays in a stack (fs.go, the inode cache's invariant):
// fold and prune delete only references an upper layer shadows, or copy a
// layer into the one below it while the upper one stays in every stack
// holding the lower. So the block references a READ resolves through the
// frozen layers of a stack can be kept, and a READ of frozen data then
// reads only the top layer's record and references (none when the top
// holds no record of the inode).
//
// The cache belongs to the Store and every view shares it: an entry is
// keyed by the inode and the frozen part of the stack (the layers below
// the top, all of them), so a view of a new branch over the same frozen
// layers, or a view opened again, finds what another one resolved, and a
// view whose stack changed simply looks under another key.
//
// Folds and merges go through Store.updateRefs, naming the layers they
// write: the cache counts them per layer while they run (busy) and
// records, when each ends, the sequence number of its end (changed).
// Changes that keep the bytes but not the references (rechunk and
// coalesce swap a block's reference for chunk slices) do not count
// (Store.swapRefs): the cached references read the same bytes until a
// sweep deletes the old content, and a READ that finds content missing
// drops the cache and reads again (readInto). An entry holds the
// sequence number read before the snapshot of the READ that filled it
// (at); it is used only while none of its layers is busy or changed
// since at, and filled only if none was busy or changed since the READ
// began. A change of one layer (rechunking another branch's files, say)
// leaves the entries of stacks without it alone.
//
// Lock order: frozenCache.mu is taken last, after any View lock.

// cacheGroup is how many consecutive blocks are resolved and cached
// together: one key iteration per frozen layer fills 2 MiB of 32 KiB
// blocks.
const cacheGroup = 64

// maxChangedLayers bounds the layers frozenCache remembers changes of;
// past it, it forgets them all and drops its entries.
const maxChangedLayers = 4096

// frozenCache is the Store's cache of what frozen layers hold of inodes'
// data.
type frozenCache struct {
	max int // the bound of bytes (Options.BlockCacheBytes); read only

	mu  sync.Mutex // protects the following
	seq uint64     // counts the changes of references that ended
	// floor is the changed value of every layer not in layers.
	floor  uint64
	layers map[LayerID]layerChanges
	// entries maps frozenKey(ino, frozen stack) to its entry.
	entries map[string]*frozenData
	bytes   int // the estimated memory of entries
}

// layerChanges is what frozenCache knows of one layer's changes.
type layerChanges struct {
	busy    int    // changes of its references running
	changed uint64 // seq when the last one ended
}

func newFrozenCache(max int) *frozenCache {
	return &frozenCache{max: max, layers: map[LayerID]layerChanges{}, entries: map[string]*frozenData{}}
}

// begin records that a change of the references of layers starts.
func (c *frozenCache) begin(layers []LayerID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range layers {
		r, ok := c.layers[l]
		if !ok {
			r.changed = c.floor
		}
		r.busy++
		c.layers[l] = r
	}
}

// end records that a change begun with begin(layers) ended (committed or
// not).
func (c *frozenCache) end(layers []LayerID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	for _, l := range layers {
		r := c.layers[l]
		r.busy--
		r.changed = c.seq
		c.layers[l] = r
	}
	if len(c.layers) > maxChangedLayers {
		// Keep the busy layers; every other one changed at floor at the
		// latest, which no entry is newer than once they are dropped.
		c.floor = c.seq
		for l, r := range c.layers {
			if r.busy == 0 {
				delete(c.layers, l)
			}
		}
		c.dropLocked()
	}
}

// forget drops the record of the changes of layer l, once l is deleted
// (Store.DeleteLayer), unless another change of it runs. Without it every
// ended branch would leave its top layer's record here, until
// maxChangedLayers of them dropped the whole cache. No stack holds l again
// (layer ids are never reused, and a layer is deleted once nothing
// references it), so entries of stacks holding it, which the byte bound
// ages out, are never looked up.
func (c *frozenCache) forget(l LayerID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.layers[l]; ok && r.busy == 0 {
		delete(c.layers, l)
	}
}

// bump starts a new sequence number and returns it: entries filled
// before it carry a lower at.
func (c *frozenCache) bump() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

// stableLocked reports whether no layer of stack is busy or changed
// after at.
func (c *frozenCache) stableLocked(stack []LayerID, at uint64) bool {
	for _, l := range stack {
		r, ok := c.layers[l]
		if !ok {
			r.changed = c.floor
		}
		if r.busy > 0 || r.changed > at {
			return false
		}
	}
	return true
}

// drop empties the cache.
func (c *frozenCache) drop() {
	c.mu.Lock()
	c.dropLocked()
	c.mu.Unlock()
}

func (c *frozenCache) dropLocked() {
	// Start over rather than keep a big map: clear would keep its
	// buckets.
	c.entries, c.bytes = map[string]*frozenData{}, 0
}

// frozenKey is the cache key of ino under the frozen layers of a stack.
func frozenKey(ino InodeID, frozen []LayerID) string {
	b := make([]byte, 0, 8*(1+len(frozen)))
	b = binary.BigEndian.AppendUint64(b, uint64(ino))
	for _, l := range frozen {
		b = binary.BigEndian.AppendUint64(b, uint64(l))
	}
	return string(b)
}

// frozenData is what the frozen layers of a stack hold of one inode's
// data, or, for an entry of a top layer (topcache.go), what that layer
// holds of it. All but groups is read only; groups is guarded by the
// frozenCache's mu, its slices read only once stored.
type frozenData struct {
	key    string    // frozenKey, or topKey
	stack  []LayerID // the frozen layers of the stack, top first; or the top layer alone
	at     uint64    // the cache's seq before the filling READ's snapshot
	layers []LayerID // frozen layers holding a record, top first, down to the first with cut 0
	cuts   []uint64  // their records' Cut; 0 for a tombstone
	// rec, in an entry of a top layer, is the layer's record of the
	// inode, nil if it holds none; shared, read only.
	rec *inode
	// groups maps group g to the resolved references of blocks
	// [g*cacheGroup, (g+1)*cacheGroup), a nil ref for a hole, with limits
	// from the entry's layers' cuts alone.
	groups map[uint64][]resolved
}

// readGen is what a READ needs of the cache, taken before its snapshot.
type readGen struct {
	at uint64 // the cache's seq
	ok bool   // the cache may be used
}

// readGen returns the generation for a READ about to begin.
func (f *View) readGen() readGen {
	if f.opts.BlockCacheBytes < 0 {
		return readGen{}
	}
	c := f.s.frozen
	c.mu.Lock()
	defer c.mu.Unlock()
	return readGen{at: c.seq, ok: true}
}

// newReadBlockReader is newBlockReader for a READ of an inode whose top
// layer's record the caller read (top, nil if that layer holds none): the
// frozen layers come from the cache (filled on a miss), and only the top
// layer's references are read, or taken from td, the top layer's cache
// entry, when it is not nil (topcache.go).
func (f *View) newReadBlockReader(tx kv.Txn, st state, ino InodeID, top *inode, rg readGen, td *frozenData) (*blockReader, error) {
	if !rg.ok || (len(st.stack) < 2 && td == nil) {
		return f.newBlockReader(tx, st, ino)
	}
	br := &blockReader{f: f, tx: tx, ino: ino, gen: rg}
	if td != nil {
		br.top = td
		if len(td.layers) > 0 && td.cuts[0] == 0 || len(st.stack) < 2 {
			return br, nil // nothing below is visible
		}
	} else if top != nil {
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

// frozenDataOf returns the cached frozenData of ino under st's frozen
// layers, reading and caching it on a miss. The caller's snapshot is
// fixed already (it read the top layer's record): an entry whose layers
// are neither busy nor changed since it was filled then holds what the
// snapshot shows.
func (f *View) frozenDataOf(tx kv.Txn, st state, ino InodeID, rg readGen) (*frozenData, error) {
	c := f.s.frozen
	key := frozenKey(ino, st.stack[1:])
	c.mu.Lock()
	if fd, ok := c.entries[key]; ok && c.stableLocked(fd.stack, fd.at) {
		c.mu.Unlock()
		return fd, nil
	}
	c.mu.Unlock()
	fr, err := f.frozenOf(tx, st, ino)
	if err != nil {
		return nil, err
	}
	fd := &frozenData{key: key, stack: append([]LayerID(nil), st.stack[1:]...), at: rg.at, groups: map[uint64][]resolved{}}
	if fd.layers, fd.cuts, err = dataLayers(tx, fr.layers, ino); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stableLocked(fd.stack, rg.at) {
		return fd, nil // keep it to this READ
	}
	if old, ok := c.entries[key]; ok && c.stableLocked(old.stack, old.at) { // a racing READ filled it
		return old, nil
	}
	c.putLocked(fd)
	return fd, nil
}

// putLocked stores entry fd in place of any under its key, starting over
// if it would take the cache past its bound.
func (c *frozenCache) putLocked(fd *frozenData) {
	size := fd.size()
	if c.bytes+size > c.max {
		c.dropLocked()
	}
	if old, ok := c.entries[fd.key]; ok {
		c.bytes -= old.sizeLocked()
	}
	c.entries[fd.key] = fd
	c.bytes += size
}

// size estimates the memory of a new entry: the map slot, the key, the
// entry, its slices and its record.
func (fd *frozenData) size() int {
	n := 160 + 2*len(fd.key) + 8*len(fd.stack) + 16*len(fd.layers)
	if fd.rec != nil {
		n += fd.rec.size()
	}
	return n
}

// sizeLocked is size with the groups the entry holds.
func (fd *frozenData) sizeLocked() int {
	n := fd.size()
	for _, grp := range fd.groups {
		n += groupSize(grp)
	}
	return n
}

// groupSize estimates the memory of a cached group.
func groupSize(grp []resolved) int {
	n := 48 + cacheGroup*32
	for _, r := range grp {
		n += len(r.ref)
	}
	return n
}

// frozenGroup returns the frozen layers' references of group g, from the
// cache or resolved and cached.
func (br *blockReader) frozenGroup(g uint64) ([]resolved, error) { return br.group(br.frozen, g) }

// group returns the references fd's layers hold of group g, from the
// cache or resolved and cached.
func (br *blockReader) group(fd *frozenData, g uint64) ([]resolved, error) {
	c := br.f.s.frozen
	c.mu.Lock()
	grp, ok := fd.groups[g]
	c.mu.Unlock()
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
	size := groupSize(grp)
	c.mu.Lock()
	defer c.mu.Unlock()
	// The entry must still be the cache's and hold what this READ's
	// snapshot shows: no change of its layers since either began.
	if c.entries[fd.key] != fd || !c.stableLocked(fd.stack, min(fd.at, br.gen.at)) {
		return grp, nil // keep it to this READ
	}
	if c.bytes+size > c.max {
		c.dropLocked()
		return grp, nil
	}
	if old, ok := fd.groups[g]; ok {
		return old, nil
	}
	fd.groups[g] = grp
	c.bytes += size
	return grp, nil
}

// blockRangeCached is blockRange for a reader with frozen or top set:
// the top layer's references (cached, with top), then the cached frozen
// ones it does not shadow, limited by the top record's cut.
func (br *blockReader) blockRangeCached(first, last uint64) ([]resolved, error) {
	out := make([]resolved, last-first+1)
	limit := uint64(1<<64 - 1)
	switch {
	case br.top != nil:
		if len(br.top.layers) == 0 {
			break // the top holds no record: none of the inode's blocks
		}
		for g := first / cacheGroup; g <= last/cacheGroup; g++ {
			grp, err := br.group(br.top, g)
			if err != nil {
				return nil, err
			}
			lo := g * cacheGroup
			for idx := max(first, lo); idx <= min(last, lo+cacheGroup-1); idx++ {
				out[idx-first] = grp[idx-lo]
			}
		}
		limit = br.top.cuts[0]
	case len(br.layers) > 0:
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
	if br.frozen == nil || len(br.frozen.layers) == 0 {
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

package kv

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// locCache remembers where the value logs hold the values of fixed keys
// (ValueRead.Fixed), so that a READ of content read before finds its
// blocks without a lookup each (a Get walks the memtables and levels:
// 32 per MiB of content). An entry found here is read like one just
// located: the read checks the entry's header and key, so a wrong
// location is never returned as the value; and a log Badger deleted
// cannot be opened, and such values are looked up again.
//
// The entries lie in a ring, in the order they were put, and an index
// maps a hash of each key to its place there. A file's blocks are put in
// the order they were written, and read again in that order: so getFixed
// first looks for a key right after the one found before it, a compare
// of memory it reads in sequence, and only then in the index. A READ of
// 32 blocks made 32 lookups in a map of string keys, each of them, after
// the 2 MiB of copies a READ makes, a few misses of the processor's
// caches: 690 ns a lookup, 5% of the server's time over a sequential
// read (BenchmarkLocCache).
//
// The ring holds locCacheSize entries; a put past that overwrites the
// oldest. An entry found in the older half of the ring is put again, at
// its head, so that content read often stays.
type locCache struct {
	seed maphash.Seed // read only, once ring is made

	mu    sync.Mutex        // protects the following
	ring  []locSlot         // locCacheSize, made by the first put
	next  uint64            // the sequence number of the next put; slot next%locCacheSize
	index map[uint64]uint64 // maphash of a key -> sequence number of its latest put
}

// locCacheSize bounds the entries: 65,536 entries of 32 KiB blocks locate
// 2 GiB of content, for about 6 MiB of memory.
const locCacheSize = 1 << 16

// locKeyMax is the longest key the cache holds (a content key, a prefix
// byte and a 32-byte hash, is 33 bytes); longer keys are looked up every
// time.
const locKeyMax = 39

// locSlot is one entry of the ring: a key of at most locKeyMax bytes
// (n 0: none), stored inline, its hash, and where its value lies.
type locSlot struct {
	n   uint8
	key [locKeyMax]byte
	h   uint64
	loc locEntry
}

func (s *locSlot) is(key []byte) bool {
	return s.n != 0 && int(s.n) == len(key) && bytes.Equal(s.key[:s.n], key)
}

// locEntry is a vlogEntry in 24 bytes: Badger's value pointers hold the
// offset and length of an entry as uint32s, and an entry's header is a
// few bytes and the key.
type locEntry struct {
	fid, offset, vlen uint32
	hdr, klen         uint16
	expiresAt         uint64
}

// pack returns e as a locEntry; ok false if a field does not fit.
func pack(e vlogEntry) (locEntry, bool) {
	l := locEntry{fid: e.fid, offset: uint32(e.offset), vlen: uint32(e.vlen), hdr: uint16(e.hdr), klen: uint16(e.klen), expiresAt: e.expiresAt}
	return l, l.unpack() == vlogEntry{fid: e.fid, offset: e.offset, hdr: e.hdr, vlen: e.vlen, klen: e.klen, expiresAt: e.expiresAt}
}

func (l locEntry) unpack() vlogEntry {
	return vlogEntry{fid: l.fid, offset: int64(l.offset), hdr: int(l.hdr), vlen: int(l.vlen), klen: int(l.klen), expiresAt: l.expiresAt}
}

// getFixed sets es[i] to the remembered location of each Fixed value of
// rs whose Dst holds it, marked cached, under one hold of the lock (a READ
// asks for 32 at once), and returns how many it found.
func (c *locCache) getFixed(rs []ValueRead, es []vlogEntry) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring == nil {
		return 0
	}
	found := 0
	after := ^uint64(0) // the sequence number of the entry found last
	for i := range rs {
		if !rs[i].Fixed || len(rs[i].Key) > locKeyMax {
			continue
		}
		seq, ok := c.seqLocked(rs[i].Key, after)
		if !ok {
			after = ^uint64(0)
			continue
		}
		s := &c.ring[seq%locCacheSize]
		l := s.loc
		if c.next-seq > locCacheSize/2 {
			seq = c.putLocked(rs[i].Key, s.h, l)
		}
		after = seq
		if len(rs[i].Dst) >= int(l.vlen) {
			e := l.unpack()
			e.cached = true
			es[i] = e
			found++
		}
	}
	return found
}

// seqLocked returns the sequence number of key's entry: the one after
// after, if it is key's, else the index's.
func (c *locCache) seqLocked(key []byte, after uint64) (uint64, bool) {
	if seq := after + 1; after != ^uint64(0) && seq < c.next && c.ring[seq%locCacheSize].is(key) {
		return seq, true
	}
	seq, ok := c.index[maphash.Bytes(c.seed, key)]
	if !ok || c.next-seq > locCacheSize || !c.ring[seq%locCacheSize].is(key) {
		return 0, false
	}
	return seq, true
}

func (c *locCache) put(key []byte, e vlogEntry) {
	l, fits := pack(e)
	if len(key) > locKeyMax || len(key) == 0 || !fits {
		return
	}
	c.mu.Lock()
	if c.ring == nil {
		c.seed = maphash.MakeSeed()
		c.ring = make([]locSlot, locCacheSize)
		c.index = make(map[uint64]uint64, locCacheSize)
	}
	c.putLocked(key, maphash.Bytes(c.seed, key), l)
	c.mu.Unlock()
}

// putLocked puts key (h, its hash) at the ring's head, in place of the
// oldest entry, and returns its sequence number.
func (c *locCache) putLocked(key []byte, h uint64, l locEntry) uint64 {
	seq := c.next
	c.next++
	s := &c.ring[seq%locCacheSize]
	if s.n != 0 && c.index[s.h] == seq-locCacheSize {
		delete(c.index, s.h)
	}
	s.n = uint8(copy(s.key[:], key))
	s.h, s.loc = h, l
	c.index[h] = seq
	return seq
}

// forget drops the location of key (its read failed).
func (c *locCache) forget(key []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring == nil || len(key) > locKeyMax {
		return
	}
	if seq, ok := c.seqLocked(key, ^uint64(0)); ok {
		s := &c.ring[seq%locCacheSize]
		delete(c.index, s.h)
		s.n = 0
	}
}

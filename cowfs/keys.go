package cowfs

import (
	"encoding/binary"
	"hash/fnv"
)

// Key layout (see docs/design.md). All integers are big-endian so keys sort
// numerically.
//
//	'l' layer(8) 'i' ino(8)            inode record (or tombstone)
//	'l' layer(8) 'e' dir(8) slot(8)    directory entry (or whiteout)
//	'l' layer(8) 'd' ino(8) block(8)   block reference
//	'l' layer(8) 'd' ino(8) last(8) 'x'  extent reference: blocks up to last (extent.go)
//	'l' layer(8) 's' dir(8) slot(8)    a silly-rename name was linked there
//	'l' layer(8) 't' ino(8)            a truncate's leftover blocks are being purged (purgeStale)
//	'L' layer(8)                       layer record: below(8)
//	'c' hash(32)                       block content, stored once per hash (unless Options.Blobs holds it: content.go)
//	'M' name                           counters and store metadata
const (
	pfxLayerData = 'l'
	pfxLayer     = 'L'
	pfxContent   = 'c'
	pfxMeta      = 'M'

	kindInode = 'i'
	kindEntry = 'e'
	kindData  = 'd'
	kindSilly = 's'
	kindStale = 't'
)

func u64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// layerPrefix is the prefix of every key a layer holds.
func layerPrefix(l LayerID) []byte { return u64([]byte{pfxLayerData}, uint64(l)) }

func inodeKey(l LayerID, ino InodeID) []byte {
	return u64(append(layerPrefix(l), kindInode), uint64(ino))
}

func entryPrefix(l LayerID, dir InodeID) []byte {
	return u64(append(layerPrefix(l), kindEntry), uint64(dir))
}

func entryKey(l LayerID, dir InodeID, slot uint64) []byte {
	return u64(entryPrefix(l, dir), slot)
}

func dataPrefix(l LayerID, ino InodeID) []byte {
	return u64(append(layerPrefix(l), kindData), uint64(ino))
}

func dataKey(l LayerID, ino InodeID, block uint64) []byte {
	return u64(dataPrefix(l, ino), block)
}

// isDataKey reports whether k is a block-reference key (of a block or
// an extent).
func isDataKey(k []byte) bool {
	return (len(k) == 26 || len(k) == 27 && k[26] == extentMark) && k[0] == pfxLayerData && k[9] == kindData
}

func sillyPrefix(l LayerID) []byte { return append(layerPrefix(l), kindSilly) }

func sillyKey(l LayerID, dir InodeID, slot uint64) []byte {
	return u64(u64(sillyPrefix(l), uint64(dir)), slot)
}

func stalePrefix(l LayerID) []byte { return append(layerPrefix(l), kindStale) }

func staleKey(l LayerID, ino InodeID) []byte { return u64(stalePrefix(l), uint64(ino)) }

func layerKey(l LayerID) []byte { return u64([]byte{pfxLayer}, uint64(l)) }

func contentKey(h []byte) []byte { return append([]byte{pfxContent}, h...) }

func metaKey(name string) []byte { return append([]byte{pfxMeta}, name...) }

// nameSlot is the first probe slot of a directory entry: a 63-bit hash of the
// name's normalized form (foldName), so that the NFC and NFD spellings of a
// name share a probe chain, that never falls on the cookies reserved for
// the start, "." and "..". Slots double as READDIR cookies, so listings
// resume by seeking, and stay valid while the directory changes.
func nameSlot(name string) uint64 { return hashSlot(foldName(name)) }

// hashSlot hashes the bytes of s into a slot. Stores of format 1 placed
// every entry at hashSlot of its name's bytes as given.
func hashSlot(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	v := h.Sum64() & slotMask
	if v < firstSlot {
		v += firstSlot
	}
	return v
}

// slotMask keeps the 63 bits of the hash that make a slot. Tests narrow it
// to force collisions.
var slotMask uint64 = 1<<63 - 1

const (
	firstSlot = 3
	maxProbe  = 16 // linear probes on hash collisions
)

func slotOf(key []byte) uint64 { return binary.BigEndian.Uint64(key[len(key)-8:]) }

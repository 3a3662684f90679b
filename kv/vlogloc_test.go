package kv

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
)

// locKeys returns n content-like keys: a prefix byte and a 32-byte hash.
func locKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		var x [8]byte
		binary.LittleEndian.PutUint64(x[:], uint64(i))
		h := sha256.Sum256(x[:])
		keys[i] = append([]byte{'c'}, h[:]...)
	}
	return keys
}

// locAt is the entry the tests put for key number i.
func locAt(i int) vlogEntry {
	return vlogEntry{fid: uint32(1 + i/1000), offset: int64(i) * 100, hdr: 45, vlen: 50, klen: 41}
}

// getLocs asks c for keys[from:to], in order, and returns what it found
// (zero entries for the others) and how many.
func getLocs(c *locCache, keys [][]byte, from, to int) ([]vlogEntry, int) {
	rs := make([]ValueRead, to-from)
	for i := range rs {
		rs[i] = ValueRead{Key: keys[from+i], Dst: make([]byte, 64), Fixed: true}
	}
	es := make([]vlogEntry, len(rs))
	return es, c.getFixed(rs, es)
}

// TestLocCache checks that the location cache returns what was put for
// each key, whether it finds it after the key before it or through its
// index, and nothing for keys it never held, dropped or overwrote.
func TestLocCache(t *testing.T) {
	var c locCache
	keys := locKeys(locCacheSize + 2000)
	if _, n := getLocs(&c, keys, 0, 10); n != 0 {
		t.Fatalf("an empty cache found %d", n)
	}
	for i := 0; i < 1000; i++ {
		c.put(keys[i], locAt(i))
	}
	check := func(from, to int, want func(i int) bool) {
		t.Helper()
		es, _ := getLocs(&c, keys, from, to)
		for k, e := range es {
			i := from + k
			e.cached = false
			if want(i) && e != locAt(i) {
				t.Fatalf("key %d: got %+v, want %+v", i, e, locAt(i))
			}
			if !want(i) && e.klen != 0 {
				t.Fatalf("key %d: got %+v, want nothing", i, e)
			}
		}
	}
	all := func(int) bool { return true }
	check(0, 1000, all)  // in sequence
	check(500, 600, all) // from the middle
	check(990, 1010, func(i int) bool { return i < 1000 })
	// Out of order: every key through the index.
	rs := []ValueRead{{Key: keys[7], Dst: make([]byte, 64), Fixed: true}, {Key: keys[3], Dst: make([]byte, 64), Fixed: true}, {Key: keys[999], Dst: make([]byte, 64), Fixed: true}}
	es := make([]vlogEntry, 3)
	if n := c.getFixed(rs, es); n != 3 || es[0].offset != locAt(7).offset || es[1].offset != locAt(3).offset || es[2].offset != locAt(999).offset {
		t.Fatalf("out of order: %d found, %+v", n, es)
	}
	// A destination too short for the value: not found.
	rs = []ValueRead{{Key: keys[5], Dst: make([]byte, 10), Fixed: true}, {Key: keys[6], Dst: make([]byte, 64)}}
	if n := c.getFixed(rs, es[:2]); n != 0 {
		t.Fatalf("found %d for a short destination and a key not Fixed", n)
	}

	c.forget(keys[10])
	check(0, 20, func(i int) bool { return i != 10 })

	// A key put again is found at its latest place.
	moved := locAt(5)
	moved.offset += 7
	c.put(keys[5], moved)
	if es, n := getLocs(&c, keys, 5, 6); n != 1 || es[0].offset != moved.offset {
		t.Fatalf("a key put again: %+v", es[0])
	}
	c.put(keys[5], locAt(5))

	// Fill the ring past its size: the oldest entries go, except those
	// read in its older half, which are put again.
	for i := 1000; i < locCacheSize-1000; i++ {
		c.put(keys[i], locAt(i))
	}
	check(100, 200, all) // older half: put again
	for i := locCacheSize - 1000; i < len(keys); i++ {
		c.put(keys[i], locAt(i))
	}
	check(100, 200, all)
	check(0, 100, func(i int) bool { return false })
	check(len(keys)-3000, len(keys), all)
	if len(c.index) > locCacheSize {
		t.Fatalf("index holds %d keys, more than the ring's %d", 0, locCacheSize)
	}

	// Keys too long, values too far for a locEntry: not held.
	long := make([]byte, locKeyMax+1)
	c.put(long, locAt(1))
	far := locAt(2)
	far.offset = 1 << 33
	c.put(keys[2], far)
	rs = []ValueRead{{Key: long, Dst: make([]byte, 64), Fixed: true}}
	if n := c.getFixed(rs, es[:1]); n != 0 {
		t.Fatal("a key longer than locKeyMax was found")
	}
	if es, n := getLocs(&c, keys, 2, 3); n != 0 {
		t.Fatalf("an offset past 4 GiB was held: %+v", es[0])
	}
}

// BenchmarkLocCache measures getFixed for a READ of 32 blocks, of a file
// whose blocks were put in order (the sequential read), or in an order
// unrelated to the read's (each block through the index). Between two,
// untimed, it copies 2 MiB, as a READ of 1 MiB does (into its reply, and
// from there into the socket), which leaves little of the cache in the
// processor's caches.
func BenchmarkLocCache(b *testing.B) {
	keys := locKeys(30000)
	for _, order := range []string{"sequential", "scattered"} {
		b.Run(order, func(b *testing.B) {
			var c locCache
			perm := make([]int, len(keys))
			for i := range perm {
				perm[i] = i
				if order == "scattered" {
					perm[i] = (i * 7919) % len(keys)
				}
				c.put(keys[perm[i]], locAt(perm[i]))
			}
			rs := make([]ValueRead, 32)
			es := make([]vlogEntry, 32)
			dst := make([]byte, 64)
			from, to := make([]byte, 2<<20), make([]byte, 2<<20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				copy(to, from)
				b.StartTimer()
				from := (i * 32 * 37) % (len(keys) - 32)
				for k := range rs {
					rs[k] = ValueRead{Key: keys[from+k], Dst: dst, Fixed: true}
				}
				if c.getFixed(rs, es) != 32 {
					b.Fatal("not every block found")
				}
			}
		})
	}
}

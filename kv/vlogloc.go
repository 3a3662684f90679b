package kv

import "sync"

// locCache remembers where the value logs hold the values of fixed keys
// (ValueRead.Fixed), so that a READ of content read before finds its
// blocks without a lookup each (a Get walks the memtables and levels:
// 32 per MiB of content). An entry found here is read like one just
// located: the read checks the entry's header and key, so a wrong
// location is never returned as the value; and a log Badger deleted
// cannot be opened, and such values are looked up again.
//
// It keeps two generations of at most locCacheGen entries: a new one
// starts when the current one is full, and the one before it is dropped;
// an entry found in the older generation moves to the current one.
type locCache struct {
	mu        sync.Mutex
	cur, prev map[string]vlogEntry
}

// locCacheGen bounds a generation: 32,768 entries of 32 KiB blocks locate
// 1 GiB of content, for about 4 MiB of memory.
const locCacheGen = 1 << 15

// getFixed sets es[i] to the remembered location of each Fixed value of
// rs whose Dst holds it, marked cached, under one hold of the lock (a READ
// asks for 32 at once), and returns how many it found.
func (c *locCache) getFixed(rs []ValueRead, es []vlogEntry) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	found := 0
	for i := range rs {
		if !rs[i].Fixed {
			continue
		}
		e, ok := c.cur[string(rs[i].Key)]
		if !ok {
			if e, ok = c.prev[string(rs[i].Key)]; ok {
				c.putLocked(string(rs[i].Key), e)
			}
		}
		if ok && len(rs[i].Dst) >= e.vlen {
			e.cached = true
			es[i] = e
			found++
		}
	}
	return found
}

func (c *locCache) put(key []byte, e vlogEntry) {
	c.mu.Lock()
	c.putLocked(string(key), e)
	c.mu.Unlock()
}

func (c *locCache) putLocked(key string, e vlogEntry) {
	if len(c.cur) >= locCacheGen {
		c.prev, c.cur = c.cur, nil
	}
	if c.cur == nil {
		c.cur = make(map[string]vlogEntry)
	}
	c.cur[key] = e
}

// forget drops the location of key (its read failed).
func (c *locCache) forget(key []byte) {
	c.mu.Lock()
	delete(c.cur, string(key))
	delete(c.prev, string(key))
	c.mu.Unlock()
}

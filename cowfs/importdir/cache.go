package importdir

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/branchnfs/branchnfs/kv"
	"golang.org/x/sys/unix"
)

// The stat cache: what the source looked like when each of its entries was
// last brought into the store, as git's index keeps it, so that Update
// reads and hashes only entries whose stat changed. It is owned by this
// package and kept in the store's kv under its own prefix:
//
//	'H' path       Stat (statLen bytes, big-endian; see encode)
//
// path is relative to the source, '/'-separated ("" is never stored).

var cachePrefix = []byte{'H'}

// Stat is one source entry as the cache keeps it.
type Stat struct {
	Mode     uint32 // st_mode: type and permission bits
	UID, GID uint32
	Size     int64
	Mtime    int64 // ns
	Ctime    int64 // ns
	Dev, Ino uint64
	// Racy is set when the entry changed so close to the moment it was
	// read that a later change could leave its stat as it is (git's "racy
	// git"): Update then hashes it whatever its stat says.
	Racy bool
	// Hash is the BLAKE3 hash of a regular file's content or of a
	// symlink's target; zero for other types.
	Hash [32]byte
}

const statLen = 4 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 1 + 32

func makeStat(st *unix.Stat_t, h [32]byte) Stat {
	return Stat{
		Mode: uint32(st.Mode), UID: st.Uid, GID: st.Gid, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
		Dev: uint64(st.Dev), Ino: uint64(st.Ino), Hash: h,
	}
}

// sameStat reports whether the source entry st is still what c recorded.
func (c Stat) sameStat(st *unix.Stat_t) bool {
	return !c.Racy && c.Mode == uint32(st.Mode) && c.UID == st.Uid && c.GID == st.Gid &&
		c.Size == st.Size && c.Mtime == st.Mtim.Nano() && c.Ctime == st.Ctim.Nano() &&
		c.Dev == uint64(st.Dev) && c.Ino == uint64(st.Ino)
}

func (c Stat) encode() []byte {
	b := make([]byte, 0, statLen)
	b = binary.BigEndian.AppendUint32(b, c.Mode)
	b = binary.BigEndian.AppendUint32(b, c.UID)
	b = binary.BigEndian.AppendUint32(b, c.GID)
	for _, v := range []uint64{uint64(c.Size), uint64(c.Mtime), uint64(c.Ctime), c.Dev, c.Ino} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	if c.Racy {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return append(b, c.Hash[:]...)
}

func decodeStat(b []byte) (Stat, error) {
	if len(b) != statLen {
		return Stat{}, fmt.Errorf("importdir: corrupt stat cache entry (%d bytes, want %d)", len(b), statLen)
	}
	var c Stat
	c.Mode = binary.BigEndian.Uint32(b)
	c.UID = binary.BigEndian.Uint32(b[4:])
	c.GID = binary.BigEndian.Uint32(b[8:])
	c.Size = int64(binary.BigEndian.Uint64(b[12:]))
	c.Mtime = int64(binary.BigEndian.Uint64(b[20:]))
	c.Ctime = int64(binary.BigEndian.Uint64(b[28:]))
	c.Dev = binary.BigEndian.Uint64(b[36:])
	c.Ino = binary.BigEndian.Uint64(b[44:])
	c.Racy = b[52] == 1
	copy(c.Hash[:], b[53:])
	return c, nil
}

// Cache is the stat cache of one source, in memory. It is not safe for
// concurrent use.
type Cache struct {
	m     map[string]Stat
	dirty map[string]bool // written (true) or deleted (false) since loaded
	reset bool            // Save replaces everything stored
}

// NewCache returns an empty cache whose Save replaces whatever is stored:
// the cache of a full import.
func NewCache() *Cache {
	return &Cache{m: map[string]Stat{}, dirty: map[string]bool{}, reset: true}
}

// LoadCache reads the stored cache (empty if there is none).
func LoadCache(ctx context.Context, store kv.Store) (*Cache, error) {
	c := &Cache{m: map[string]Stat{}, dirty: map[string]bool{}}
	err := store.View(ctx, func(tx kv.Txn) error {
		return tx.Iterate(cachePrefix, nil, false, func(k, v []byte) (bool, error) {
			s, err := decodeStat(v)
			if err != nil {
				return false, err
			}
			c.m[string(k[len(cachePrefix):])] = s
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("importdir: load the stat cache: %w", err)
	}
	return c, nil
}

// Len is the number of entries.
func (c *Cache) Len() int { return len(c.m) }

// Get returns the entry of path.
func (c *Cache) Get(path string) (Stat, bool) {
	s, ok := c.m[path]
	return s, ok
}

func (c *Cache) put(path string, s Stat) {
	c.m[path] = s
	c.dirty[path] = true
}

func (c *Cache) remove(path string) {
	if _, ok := c.m[path]; ok {
		delete(c.m, path)
		c.dirty[path] = false
	}
}

// Save stores what changed since the cache was loaded (everything, for a
// NewCache), in transactions sized by the store's limits. A crash part-way
// leaves some entries old: Update then rereads those, which costs time,
// never correctness (see Update).
func (c *Cache) Save(ctx context.Context, store kv.Store) error {
	type op struct {
		key []byte
		val []byte // nil: delete
	}
	var ops []op
	if c.reset {
		err := store.View(ctx, func(tx kv.Txn) error {
			return tx.Iterate(cachePrefix, nil, true, func(k, _ []byte) (bool, error) {
				if _, ok := c.m[string(k[len(cachePrefix):])]; !ok {
					ops = append(ops, op{key: bytes.Clone(k)})
				}
				return true, nil
			})
		})
		if err != nil {
			return fmt.Errorf("importdir: save the stat cache: %w", err)
		}
		for p := range c.m {
			c.dirty[p] = true
		}
	}
	paths := make([]string, 0, len(c.dirty))
	for p := range c.dirty {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		o := op{key: append(append([]byte{}, cachePrefix...), p...)}
		if c.dirty[p] {
			o.val = c.m[p].encode()
		}
		ops = append(ops, o)
	}
	lim := store.Limits()
	per := max(1, min(4096, lim.Batch(1, 4096+statLen+lim.OpBytes)))
	for len(ops) > 0 {
		n := min(per, len(ops))
		batch := ops[:n]
		err := store.Update(ctx, func(tx kv.Txn) error {
			for _, o := range batch {
				var err error
				if o.val == nil {
					err = tx.Delete(o.key)
				} else {
					err = tx.Set(o.key, o.val)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("importdir: save the stat cache: %w", err)
		}
		ops = ops[n:]
	}
	c.dirty, c.reset = map[string]bool{}, false
	return nil
}

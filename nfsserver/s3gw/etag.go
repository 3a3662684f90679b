package s3gw

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"io"
	"sync"

	"github.com/branchnfs/branchnfs/cowfs"
)

// defaultEtagEntries bounds the ETag cache (about 100 bytes an entry).
const defaultEtagEntries = 1 << 18

// onDemandMD5 is the largest file whose MD5 a HEAD, GET or listing
// computes when it has none: reading it costs less than a round trip.
const onDemandMD5 = 1 << 20

// etagKey is one version of an inode: any write (through S3 or NFS)
// changes its size, mtime or ctime, and a reused number has a new
// generation. Forks share inode numbers, so one entry serves every branch
// that did not change the file.
type etagKey struct {
	ino          cowfs.InodeID
	gen          cowfs.Gen
	size         uint64
	mtime, ctime int64
}

func keyOf(a cowfs.Attr) etagKey {
	return etagKey{ino: a.Ino, gen: a.Gen, size: a.Size, mtime: a.Mtime.UnixNano(), ctime: a.Ctime.UnixNano()}
}

// etagCache maps inode versions to the MD5 of their content.
type etagCache struct {
	max int // read only
	mu  sync.Mutex
	m   map[etagKey]string // protected by mu
}

func newEtagCache(max int) *etagCache { return &etagCache{max: max, m: map[etagKey]string{}} }

func (c *etagCache) get(a cowfs.Attr) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[keyOf(a)]
	return e, ok
}

func (c *etagCache) known(a cowfs.Attr) bool { _, ok := c.get(a); return ok }

func (c *etagCache) put(a cowfs.Attr, etag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		// Drop an arbitrary eighth: entries are cheap to recompute or
		// fall back to the stable form.
		n := c.max / 8
		for k := range c.m {
			if n == 0 {
				break
			}
			delete(c.m, k)
			n--
		}
	}
	c.m[keyOf(a)] = etag
}

// etag returns the ETag of the file at key with attributes a: its MD5 if
// known (or, with compute, if the file is small enough to hash now), else
// a stable value in S3's multipart form, which clients do not take for an
// MD5.
func (b *Backend) etag(fsys *cowfs.Billy, key string, a cowfs.Attr, compute bool) string {
	if e, ok := b.etags.get(a); ok {
		return e
	}
	if compute && a.Size <= onDemandMD5 {
		if f, err := fsys.Open(key); err == nil {
			h := md5.New()
			n, err := io.Copy(h, f)
			f.Close()
			if err == nil && uint64(n) == a.Size {
				// The file may have changed since a: record the sum under
				// a only if it still matches.
				if fi, err := fsys.Stat(key); err == nil && keyOf(*fi.Sys().(*cowfs.Attr)) == keyOf(a) {
					e := hex.EncodeToString(h.Sum(nil))
					b.etags.put(a, e)
					return e
				}
			}
		}
	}
	k := keyOf(a)
	var buf [40]byte
	binary.BigEndian.PutUint64(buf[0:], uint64(k.ino))
	binary.BigEndian.PutUint64(buf[8:], uint64(k.gen))
	binary.BigEndian.PutUint64(buf[16:], k.size)
	binary.BigEndian.PutUint64(buf[24:], uint64(k.mtime))
	binary.BigEndian.PutUint64(buf[32:], uint64(k.ctime))
	s := md5.Sum(buf[:])
	return hex.EncodeToString(s[:]) + "-1"
}

package nfsserver

import (
	"runtime"
	"sync"
	"syscall"

	"github.com/branchnfs/branchnfs/cowfs"
)

// READDIR and READDIRPLUS.
//
// Cookies: 1 is ".", 2 is "..", anything else is a cowfs cookie, which
// stays valid while the directory changes and resumes in O(page). For the
// synthetic root, a branch's cookie is its id + 2. We never answer
// NFS3ERR_BAD_COOKIE (macOS reads it as end of directory) and the cookie
// verifier is constant (0), so clients never restart a listing.

// dirPref is FSINFO's dtpref, the READDIR size the server prefers.
// Linux (6.1) asks that much in every READDIRPLUS and allocates pages for
// all of it before the call, even for a directory whose reply fits in
// one: with 64 KiB, its guest in the kernel benchmark (a qemu TCG guest,
// where each page costs) used about a quarter more CPU on ls -lR of Go's
// src/crypto than with 32 or 16 KiB (ganesha's dtpref), and the listing
// took 1.17x as long (docs/benchmarks.md). 32 KiB still holds some 150
// entries a call, so a large directory takes half the calls of 16 KiB.
const dirPref = 32 << 10

func nfsReaddir(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	cookie := d.u64()
	d.fixed(8) // cookieverf: ignored
	count := d.u32()
	if d.err != nil {
		return errGarbage
	}
	return r.readdir(e, fh, cookie, count, count, false)
}

func nfsReaddirplus(r *request, d *decoder, e *encoder) error {
	fh := d.opaque(fhSize)
	cookie := d.u64()
	d.fixed(8) // cookieverf: ignored
	dircount := d.u32()
	maxcount := d.u32()
	if d.err != nil {
		return errGarbage
	}
	return r.readdir(e, fh, cookie, dircount, maxcount, true)
}

func (r *request) readdir(e *encoder, fh []byte, cookie uint64, dircount, maxcount uint32, plus bool) error {
	n, err := r.resolve(fh)
	if err != nil {
		return r.fail(e, n, err, 1)
	}
	if !n.isDir() {
		return r.fail(e, n, syscall.ENOTDIR, 1)
	}
	if !r.cred.may(&n.attr, mayRead) {
		return r.fail(e, n, syscall.EACCES, 1)
	}
	maxcount = min(maxcount, maxIO)
	if dircount == 0 || dircount > maxcount {
		dircount = maxcount
	}
	start := len(e.b)
	ok(e)
	putPostOp(e, n.h, &n.attr)
	e.u64(0) // cookieverf
	budget := int(maxcount) - (len(e.b) - start) - 8
	dirBudget := int(dircount)
	emitted := 0

	// emit appends one entry if it fits in the reply.
	emit := func(name string, h fileHandle, cookie uint64, a *cowfs.Attr) bool {
		dsize := 8 + xdrSize(len(name)) + 8
		size := 4 + dsize
		if plus {
			size += 4 + 4
			if a != nil {
				size += fattrSize + xdrSize(handleLen)
			}
		}
		if size > budget || (plus && emitted > 0 && dsize > dirBudget) {
			return false
		}
		budget -= size
		dirBudget -= dsize
		e.bool(true)
		e.u64(h.fileid(h.ino))
		e.string(name)
		e.u64(cookie)
		if plus {
			putPostOp(e, h, a)
			if a != nil {
				e.bool(true)
				e.opaque(r.s.encodeHandle(h))
			} else {
				e.bool(false)
			}
		}
		emitted++
		return true
	}

	full, eof := false, false
	if cookie == 0 {
		full = !emit(".", n.h, 1, &n.attr)
	}
	if !full && cookie <= 1 {
		p, err := r.parentOf(n)
		if err != nil {
			e.b = e.b[:start]
			return r.fail(e, n, err, 1)
		}
		full = !emit("..", p.h, 2, &p.attr)
	}
	if !full && n.isSyntheticRoot() {
		live, err := r.s.liveBranches(r.ctx)
		if err != nil {
			e.b = e.b[:start]
			return r.fail(e, n, err, 1)
		}
		eof = true
		for _, b := range live {
			ck := uint64(b.ID) + 2
			if ck <= cookie {
				continue
			}
			var a *cowfs.Attr
			h := fileHandle{viaRoot: true, branch: b.ID, ino: cowfs.RootIno}
			if plus {
				br, err := r.s.branchRoot(b.Name)
				if err != nil {
					continue // went away meanwhile
				}
				a, h = &br.attr, br.h
			}
			if !emit(b.Name, h, ck, a) {
				eof = false
				break
			}
		}
	} else if !full {
		from := cookie
		if from <= 2 {
			from = 0
		}
		per := 36
		if plus {
			per = 180
		}
		for !full {
			batch := min(max(budget/per+1, 1), 1024)
			ents, fsEOF, err := n.fs.ReadDir(n.attr.Ino, from, batch)
			if err != nil {
				e.b = e.b[:start]
				return r.fail(e, n, err, 1)
			}
			var attrs []*cowfs.Attr
			if plus {
				attrs = attrsOf(n.fs, ents)
			}
			for i, ent := range ents {
				h := n.h.child(ent.Ino, 0)
				var a *cowfs.Attr
				if plus {
					if a = attrs[i]; a != nil {
						h.gen = a.Gen
					}
				}
				if !emit(ent.Name, h, ent.Cookie, a) {
					full = true
					break
				}
				from = ent.Cookie
			}
			if !full && (fsEOF || len(ents) == 0) {
				eof = true
				break
			}
		}
	}
	if emitted == 0 && !eof {
		e.b = e.b[:start]
		return r.fail(e, n, errTooSmall, 1)
	}
	e.bool(false)
	e.bool(eof)
	return nil
}

// attrsOf returns the attributes of each entry (nil for one gone since the
// listing, or for a part whose read failed), read with cowfs's GetAttrs:
// the batch split over up to GOMAXPROCS goroutines, one store transaction
// each. A client listing a directory waits on one READDIRPLUS at a time,
// and the other cores are often idle. On 2 cores (BenchmarkReaddirAttrs,
// load average 1.5) the split took 1.07 us per entry in the top layer and
// 0.67 us one fork down, one transaction 1.22 and 0.77 us, and a GetAttr
// transaction per entry over the cores (as before GetAttrs) 1.90 and
// 1.45 us.
func attrsOf(fs *cowfs.View, ents []cowfs.DirEntry) []*cowfs.Attr {
	return attrsOfSplit(fs, ents, runtime.GOMAXPROCS(0))
}

// attrsOfSplit is attrsOf over up to workers goroutines of at least
// attrsPerWorker entries each.
func attrsOfSplit(fs *cowfs.View, ents []cowfs.DirEntry, workers int) []*cowfs.Attr {
	out := make([]*cowfs.Attr, len(ents))
	get := func(lo, hi int) {
		inos := make([]cowfs.InodeID, hi-lo)
		for i := range inos {
			inos[i] = ents[lo+i].Ino
		}
		if attrs, err := fs.GetAttrs(inos); err == nil {
			copy(out[lo:hi], attrs)
		}
	}
	splitRange(len(ents), min(workers, len(ents)/attrsPerWorker), get)
	return out
}

// splitRange calls fn over [0, n) in up to workers consecutive ranges, each
// on its own goroutine but the first, which runs on the caller's; it
// returns once all are done.
func splitRange(n, workers int, fn func(lo, hi int)) {
	if workers < 2 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := per; lo < n; lo += per {
		wg.Add(1)
		go func(lo int) {
			defer wg.Done()
			fn(lo, min(lo+per, n))
		}(lo)
	}
	fn(0, min(per, n))
	wg.Wait()
}

// attrsPerWorker is the least number of entries worth a goroutine of
// attrsOfSplit.
const attrsPerWorker = 32

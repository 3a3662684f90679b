package kv

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	badger "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// ValueReader is a Txn that copies part of a value straight into a
// caller's buffer, with no mapping of the value in between: a READ reads
// block content into its reply this way.
type ValueReader interface {
	// ReadValue copies the value of key from byte off on into dst, as
	// many bytes as dst holds or the value has from off, and returns how
	// many it copied (0 if off is at or past the value's end). A missing
	// key is ErrNotFound. Safe on several goroutines at once where
	// ConcurrentGets says GetFunc is.
	ReadValue(key []byte, off int, dst []byte) (int, error)
	// ReadValues reads each value of rs from its start into its Dst, as
	// ReadValue does, and sets its N; values that lie one after another
	// in the store's files are read together, in one system call, and a
	// large batch is read on two goroutines where ConcurrentGets allows.
	// It stops at the first error (ErrNotFound for a missing key).
	ReadValues(rs []ValueRead) error
}

// ValueRead is one value for ReadValues: the value of Key, read into Dst;
// N, set by ReadValues, is how many bytes it copied (the value's length,
// or len(Dst) if shorter).
type ValueRead struct {
	Key []byte
	Dst []byte
	N   int
	// Fixed says that Key's value never changes once written (content
	// stored under its own hash) and that the caller reads it only while
	// the transaction sees it: ReadValues may then read it from where it
	// found it before, without looking Key up again. A read of a Fixed
	// key that was deleted may return its old value.
	Fixed bool
}

// FixedWriter is a read-write Txn that is told which of its keys are
// Fixed (ValueRead.Fixed: content stored under its own hash): it then
// remembers where it found or wrote their values, so that the first
// ReadValues of content just written, or just found already stored,
// needs no lookup of its own. A lookup walks the memtables and the
// levels; the read of a file right after its write made 32 of them per
// MiB, a tenth of the server's time in that read. A caller checks for
// it with a type assertion and uses Has and Set when a Txn does not
// implement it.
type FixedWriter interface {
	// HasFixed is Has for a Fixed key.
	HasFixed(key []byte) (bool, error)
	// SetFixed is Set for a Fixed key.
	SetFixed(key, value []byte) error
}

// vlogFiles reads values out of Badger's value-log files with pread, into
// the caller's buffer.
//
// Badger hands a value-log value to Item.Value as a slice of its shared
// mapping of the log. Copying out of it costs a page fault for every
// 64 KiB touched again since the residency trims dropped the mapping
// (resident.go), and the pages stay mapped, in the server's RSS, until the
// next trim: for a READ that faulting was as costly as the copy itself.
// A pread copies the same bytes from the page cache with neither.
//
// Where a value lies follows from the item's value pointer (the log's
// number, the entry's offset and length; unexported, read through its
// field offset, found by reflection once) and the entry format of the
// Badger version in go.mod: a header (meta, user meta, then the key
// length, value length and expiry as uvarints), the key with its 8-byte
// version, the value, and a 4-byte CRC. The value's length is the one
// that makes those add up to the entry's. A read from the value's start
// also reads the header and key and checks them against the item (the
// key, both lengths); a mismatch turns the reader off for good and the
// read goes through Item.Value, as it does whenever anything here does
// not apply (a value in the LSM tree, a log that is gone).
//
// Value logs are written once and never reused under the same number, so
// a descriptor opened on one keeps reading the same bytes even after
// Badger deletes the file; but it keeps the file's space until closed. So
// the descriptors are closed after every value-log GC round (the only
// thing that deletes logs) and on every GC tick, and one is closed to open
// another once maxVlogFiles are open.
type vlogFiles struct {
	dir string

	// mu: read lock while a descriptor of fds is in use (a pread); write
	// lock to open or close them.
	mu  sync.RWMutex
	fds map[uint32]*os.File

	locs locCache // where values of Fixed keys lie

	off     atomic.Bool  // a header check failed: read through Item.Value only
	reads   atomic.Int64 // values read here (tests)
	runs    atomic.Int64 // of them, in runs of several (tests)
	cached  atomic.Int64 // of them, found in locs (tests)
	preadvs atomic.Int64 // runs read, one preadv each (tests)
	log     *slog.Logger
}

// maxVlogFiles bounds the descriptors vlogFiles keeps open (Badger keeps
// one of its own per log, and Go raises the soft limit on open files to
// the hard one): 128 logs of 32 MiB, 4 GiB of values read at random
// before a log's descriptor is closed to open another's.
const maxVlogFiles = 128

// itemLayout is where an Item keeps its value pointer and meta byte; ok
// only if both fields were found with the expected types.
var itemLayout = func() (l struct {
	vptr, meta uintptr
	ok         bool
}) {
	t := reflect.TypeFor[badger.Item]()
	vp, ok1 := t.FieldByName("vptr")
	meta, ok2 := t.FieldByName("meta")
	if !ok1 || !ok2 || vp.Type != reflect.TypeFor[[]byte]() || meta.Type.Kind() != reflect.Uint8 {
		return l
	}
	l.vptr, l.meta, l.ok = vp.Offset, meta.Offset, true
	return l
}()

// bitValuePointer is Badger's meta bit for "the value is a value pointer".
const bitValuePointer = 1 << 1

// vlogEntry is where an item's value lies in the value logs.
type vlogEntry struct {
	fid       uint32
	offset    int64 // of the entry
	hdr       int   // header and key bytes before the value
	vlen      int
	klen      int // the key with its version
	expiresAt uint64
	cached    bool // found in vlogFiles.locs, not looked up
}

// end is the offset of the entry after e.
func (e vlogEntry) end() int64 { return e.offset + int64(e.hdr+e.vlen+4) }

// locate reports where it's value lies, if in a value log.
func locate(it *badger.Item) (vlogEntry, bool) {
	if !itemLayout.ok {
		return vlogEntry{}, false
	}
	p := unsafe.Pointer(it)
	meta := *(*byte)(unsafe.Add(p, itemLayout.meta))
	vptr := *(*[]byte)(unsafe.Add(p, itemLayout.vptr))
	if meta&bitValuePointer == 0 || len(vptr) != 12 {
		return vlogEntry{}, false
	}
	// valuePointer{Fid, Len, Offset uint32}, copied in native byte order.
	fid := binary.NativeEndian.Uint32(vptr[0:])
	total := int(binary.NativeEndian.Uint32(vptr[4:]))
	off := int64(binary.NativeEndian.Uint32(vptr[8:]))
	e := vlogEntry{fid: fid, offset: off, klen: len(it.Key()) + 8, expiresAt: it.ExpiresAt()}
	// total = 2 + len(klen) + len(vlen) + len(expiresAt) + klen + vlen + 4:
	// solve for vlen (one solution: its uvarint length only grows with it).
	rest := total - 4 - e.klen - 2 - int(uvarintLen(uint64(e.klen))) - int(uvarintLen(e.expiresAt))
	for l := 1; l <= binary.MaxVarintLen32; l++ {
		if v := rest - l; v >= 0 && int(uvarintLen(uint64(v))) == l {
			e.vlen = v
			e.hdr = total - 4 - v
			return e, true
		}
	}
	return vlogEntry{}, false
}

// errVlogMismatch: the header read before a value does not match the item.
var errVlogMismatch = errors.New("kv: value-log entry does not match its item")

// read copies value bytes [off, off+len(dst)) of the entry e (key: the
// item's key, without version) into dst. ok false: read it another way;
// err: the header did not match, and the reader is off from now on.
func (vf *vlogFiles) read(e vlogEntry, key []byte, off int, dst []byte) (ok bool, err error) {
	if vf.off.Load() {
		return false, nil
	}
	f := vf.acquire(e.fid)
	if f == nil {
		return false, nil
	}
	defer vf.mu.RUnlock()
	vf.reads.Add(1)
	if off > 0 {
		// A short read: read it through Badger, which says why.
		return readv(f, [][]byte{dst}, e.offset+int64(e.hdr+off)) == nil, nil
	}
	var hb [64]byte
	h := hb[:0]
	if e.hdr > len(hb) {
		h = make([]byte, e.hdr)
	}
	h = h[:e.hdr]
	if readEntry(f, e.offset, h, dst) != nil {
		return false, nil
	}
	if !checkHeader(h, e, key) {
		vf.off.Store(true)
		return false, fmt.Errorf("%w: log %d offset %d", errVlogMismatch, e.fid, e.offset)
	}
	return true, nil
}

// checkHeader reports whether h, the header and key bytes of an entry,
// match e and key.
func checkHeader(h []byte, e vlogEntry, key []byte) bool {
	if len(h) < 2 {
		return false
	}
	i := 2
	klen, n := binary.Uvarint(h[i:])
	if n <= 0 || int(klen) != e.klen {
		return false
	}
	i += n
	vlen, n := binary.Uvarint(h[i:])
	if n <= 0 || int(vlen) != e.vlen {
		return false
	}
	i += n
	exp, n := binary.Uvarint(h[i:])
	if n <= 0 || exp != e.expiresAt {
		return false
	}
	i += n
	return len(h)-i == e.klen && bytes.Equal(h[i:i+len(key)], key)
}

// acquire returns a descriptor of log fid with mu read-locked, for the
// caller to unlock once done with it; nil (and mu unlocked) if the log is
// gone or its descriptor was closed meanwhile.
func (vf *vlogFiles) acquire(fid uint32) *os.File {
	vf.mu.RLock()
	if f := vf.fds[fid]; f != nil {
		return f
	}
	vf.mu.RUnlock()
	vf.open(fid)
	vf.mu.RLock()
	if f := vf.fds[fid]; f != nil {
		return f
	}
	vf.mu.RUnlock()
	return nil
}

// open opens a descriptor of log fid unless one is open; it opens none if
// the log is gone (Badger deleted it: read through Badger).
func (vf *vlogFiles) open(fid uint32) {
	vf.mu.Lock()
	defer vf.mu.Unlock()
	if _, ok := vf.fds[fid]; ok {
		return
	}
	f, err := os.Open(filepath.Join(vf.dir, fmt.Sprintf("%06d.vlog", fid)))
	if err != nil {
		return
	}
	for id, old := range vf.fds { // one out, whichever: no read is running
		if len(vf.fds) < maxVlogFiles {
			break
		}
		old.Close()
		delete(vf.fds, id)
	}
	if vf.fds == nil {
		vf.fds = map[uint32]*os.File{}
	}
	vf.fds[fid] = f
}

// closeAll closes every descriptor (they are opened again on demand).
func (vf *vlogFiles) closeAll() {
	if vf == nil {
		return
	}
	vf.mu.Lock()
	vf.closeLocked()
	vf.mu.Unlock()
}

func (vf *vlogFiles) closeLocked() {
	for fid, f := range vf.fds {
		f.Close()
		delete(vf.fds, fid)
	}
}

// maxRun bounds the entries one preadv reads (three buffers each; Linux
// takes at most 1024).
const maxRun = 256

// ReadValues reads the values of rs, each run of entries that follow one
// another in a value log with one preadv (vlogFiles.readRun), the others
// as ReadValue does. It reads them on the calling goroutine: a batch read
// in two halves on two goroutines saved nothing on a two-core machine,
// where the second goroutine's start (a wake-up of another thread) takes
// about as long as the copy of a 512 KiB half, and it cost that wake-up
// on every READ answered on a connection's reading goroutine.
func (t *badgerTxn) ReadValues(rs []ValueRead) error {
	if !t.preads(len(rs)) {
		return t.readValues(rs)
	}
	es := make([]vlogEntry, len(rs))
	cached := t.vf.locs.getFixed(rs, es)
	read := 0 // values read below, through Badger
	for i := range rs {
		if es[i].cached {
			continue
		}
		it, err := t.t.Get(rs[i].Key)
		if err != nil {
			return mapErr(err)
		}
		e, ok := locate(it)
		if !ok || len(rs[i].Dst) < e.vlen {
			// In Badger's tree (a small value), or read alone; with the
			// item found, not a second lookup.
			if rs[i].N, err = t.readItem(rs[i].Key, it, 0, rs[i].Dst); err != nil {
				return err
			}
			read++
			continue
		}
		if rs[i].Fixed {
			t.vf.locs.put(rs[i].Key, e)
		}
		es[i] = e
	}
	t.vf.cached.Add(int64(cached))
	// Entries in log order: a transaction writes its values to the log
	// one after another, but not in the order of its writes.
	order := make([]int, 0, len(rs)-read)
	for i := range rs {
		if es[i].klen != 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(es[a].fid, es[b].fid), cmp.Compare(es[a].offset, es[b].offset))
	})
	return t.readOrdered(es, rs, order)
}

// readOrdered reads the values rs[k] for k in order, which is sorted by
// place in the value logs, each run of entries that follow one another in
// a log with one preadv.
func (t *badgerTxn) readOrdered(es []vlogEntry, rs []ValueRead, order []int) error {
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && j-i < maxRun && es[order[j]].fid == es[order[i]].fid &&
			es[order[j]].offset == es[order[j-1]].end() {
			j++
		}
		ok, err := t.vf.readRun(es, rs, order[i:j])
		if err != nil {
			t.vf.log.Warn("kv: reading values through Badger from now on", "err", err)
		}
		if !ok {
			for _, k := range order[i:j] {
				if rs[k].Fixed {
					t.vf.locs.forget(rs[k].Key)
				}
				if err := t.readValues(rs[k : k+1]); err != nil {
					return err
				}
			}
		} else {
			for _, k := range order[i:j] {
				t.rsd.note(rs[k].N)
			}
		}
		i = j
	}
	return nil
}

// preads reports whether n values are read with preads (vlogFiles): in
// a read-only transaction of a store on disk, a batch of several always
// (one preadv reads a run of them: a READ of many blocks, which also
// sweeps through more than the mappings keep), a single one while the
// value logs' mappings are being trimmed (residency.trimsOn; always where
// they are not trimmed, which bounds the RSS there). A single value read
// through an untrimmed mapping (a small file's block) costs less.
func (t *badgerTxn) preads(n int) bool {
	return t.vf != nil && !t.rw && !t.vf.off.Load() && (n > 1 || t.rsd.trimsOn())
}

// readValues reads rs one by one.
func (t *badgerTxn) readValues(rs []ValueRead) error {
	for i := range rs {
		n, err := t.ReadValue(rs[i].Key, 0, rs[i].Dst)
		if err != nil {
			return err
		}
		rs[i].N = n
	}
	return nil
}

// readRun reads the whole values of the entries es[k] for k in run,
// which follow one another in one log, into rs[k].Dst, with one preadv
// that reads their headers, keys and checksums into a scratch buffer, and
// checks the headers and keys. ok false: read them another way; err: a
// header did not match, and the reader is off from now on.
func (vf *vlogFiles) readRun(es []vlogEntry, rs []ValueRead, run []int) (ok bool, err error) {
	if vf.off.Load() {
		return false, nil
	}
	f := vf.acquire(es[run[0]].fid)
	if f == nil {
		return false, nil
	}
	defer vf.mu.RUnlock()
	vf.reads.Add(int64(len(run)))
	vf.preadvs.Add(1)
	if len(run) > 1 {
		vf.runs.Add(int64(len(run)))
	}
	scratch := 0
	for _, k := range run {
		scratch += es[k].hdr + 4
	}
	sb := make([]byte, scratch)
	iov := make([][]byte, 0, 3*len(run))
	at := 0
	for _, k := range run {
		e := es[k]
		iov = append(iov, sb[at:at+e.hdr], rs[k].Dst[:e.vlen], sb[at+e.hdr:at+e.hdr+4])
		at += e.hdr + 4
	}
	if readv(f, iov, es[run[0]].offset) != nil {
		return false, nil
	}
	at = 0
	for _, k := range run {
		e := es[k]
		if !checkHeader(sb[at:at+e.hdr], e, rs[k].Key) {
			if e.cached {
				return false, nil // a wrong location: look the keys up
			}
			vf.off.Store(true)
			return false, fmt.Errorf("%w: log %d offset %d", errVlogMismatch, e.fid, e.offset)
		}
		rs[k].N = e.vlen
		at += e.hdr + 4
	}
	return true, nil
}

// ReadValue reads value bytes with pread where it can (vlogFiles), through
// Item.Value otherwise.
func (t *badgerTxn) ReadValue(key []byte, off int, dst []byte) (int, error) {
	it, err := t.t.Get(key)
	if err != nil {
		return 0, mapErr(err)
	}
	if off < 0 {
		return 0, fmt.Errorf("kv: read of a value at offset %d", off)
	}
	return t.readItem(key, it, off, dst)
}

// readItem is ReadValue of the item it, found under key.
func (t *badgerTxn) readItem(key []byte, it *badger.Item, off int, dst []byte) (int, error) {
	if t.preads(1) {
		if e, ok := locate(it); ok {
			n := max(0, min(len(dst), e.vlen-off))
			if n == 0 {
				return 0, nil
			}
			ok, err := t.vf.read(e, key, off, dst[:n])
			if err != nil {
				t.vf.log.Warn("kv: reading values through Badger from now on", "err", err)
			}
			if ok {
				t.rsd.note(n)
				return n, nil
			}
		}
	}
	return t.copyValue(key, it, off, dst)
}

// copyValue copies the value of item it, found under key, from off on into
// dst, through Badger: a value held in its tree, or one the pread reader
// did not read.
func (t *badgerTxn) copyValue(key []byte, it *badger.Item, off int, dst []byte) (int, error) {
	n := 0
	err := t.itemValue(key, it, func(v []byte) error {
		if off < len(v) {
			n = copy(dst, v[off:])
		}
		return nil
	})
	return n, err
}

// readEntry reads the header and key bytes of the entry at off into h and
// the value's first len(dst) bytes into dst, in one preadv.
func readEntry(f *os.File, off int64, h, dst []byte) error {
	return readv(f, [][]byte{h, dst}, off)
}

// readv fills the buffers of iov from the file's bytes at off on: what
// the page cache holds without waiting (readvCached), the rest with one
// preadv.
func readv(f *os.File, iov [][]byte, off int64) error {
	want := 0
	for _, b := range iov {
		want += len(b)
	}
	fd := int(f.Fd())
	got := readvCached(fd, iov, off)
	if got < want {
		n, err := unix.Preadv(fd, skipBytes(iov, got), off+int64(got))
		if err != nil {
			return err
		}
		got += n
	}
	if got < want {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// skipBytes returns the buffers of iov after their first n bytes, without
// changing iov.
func skipBytes(iov [][]byte, n int) [][]byte {
	for len(iov) > 0 && n >= len(iov[0]) {
		n -= len(iov[0])
		iov = iov[1:]
	}
	if n == 0 || len(iov) == 0 {
		return iov
	}
	rest := append([][]byte{iov[0][n:]}, iov[1:]...)
	return rest
}

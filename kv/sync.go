package kv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// groupSync shares fsyncs between concurrent Sync callers (group commit)
// while keeping two promises:
//
//   - each caller gets the result of an fsync that started after it called,
//     so it covers every transaction the caller saw committed;
//   - a failed fsync is never hidden behind a later success. After an fsync
//     error the kernel may have dropped the dirty pages it could not write
//     and a later fsync of the same file reports success, so the first
//     failure sticks: every later Sync returns it until the store is opened
//     again (and recovers from what reached the disk).
type groupSync struct {
	fn func() error // the fsync; read only

	mu      sync.Mutex // protects the following
	cond    *sync.Cond
	running bool
	started uint64 // fsyncs started
	done    uint64 // fsyncs finished
	failed  error  // first fsync failure, sticky
}

// err returns the sticky failure of an earlier fsync, if any.
func (g *groupSync) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

func newGroupSync(fn func() error) *groupSync {
	g := &groupSync{fn: fn}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// sync returns once an fsync that started after the call has finished, with
// an error if it or any earlier fsync failed.
func (g *groupSync) sync() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	want := g.started + 1 // the first fsync that starts after this call
	for g.done < want && g.failed == nil {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := g.fn()
		g.mu.Lock()
		g.running = false
		g.done = gen
		if err != nil && g.failed == nil {
			g.failed = fmt.Errorf("%w: an fsync of the store failed (%w); transactions since the last successful sync may not be durable, so every later sync fails too: restart the server, which recovers the store from what reached the disk", ErrSyncFailed, err)
		}
		g.cond.Broadcast()
	}
	return g.failed
}

// logFiles syncs Badger's write-ahead logs, which DB.Sync alone does not
// fully cover.
//
// Badger v4 writes every transaction to the write-ahead log of the active
// memtable (*.mem) and large values to the current value log (*.vlog), both
// through shared mmaps. DB.Sync msyncs only the active memtable's log and the
// newest value log. When a memtable fills, Badger rotates to a new one and
// flushes the old one to a table in the background; until that flush ends,
// the old memtable's log holds the only copy of its transactions, unsynced.
// A value log that reached its size limit is likewise rotated without a
// sync. So a DB.Sync right after a rotation would leave earlier transactions
// exposed to a power loss while a later one is durable.
//
// logFiles therefore fsyncs every *.mem and *.vlog file in the directory
// that has not been fsynced since it stopped changing, and the directory
// itself when files appeared since its last fsync (Badger does not fsync
// the directory when it creates these files). A file stops changing when
// Badger rotates away from it: the single writer finishes writing a log
// before it creates the next one, so a file with a newer sibling of the same
// kind in a listing is complete, and once fsynced it is clean for good.
// Files that disappeared since the call began were either flushed to a
// table that Badger fsynced before deleting the log, or emptied by
// value-log GC. An fsync through our own descriptor writes back the pages
// Badger dirtied through its mapping (they are the same page cache pages),
// so together the fsyncs cover every transaction committed before the
// listing, which is taken after Sync was called.
type logFiles struct {
	dir   string                  // read only
	fsync func(path string) error // read only (tests swap it under mu)

	mu      sync.Mutex      // protects the following; held across a sync
	clean   map[string]bool // complete files fsynced since they completed
	dirSeen map[string]bool // names present at the last directory fsync
	// watch reports whether names in dir may have been created, removed
	// or renamed since it was last asked (nil: always list); list is the
	// last listing, reused while the watch reports no change, and
	// listings counts the listings taken.
	watch    dirWatch
	list     *logListing
	listings int

	fdmu sync.Mutex          // protects fds; taken under mu
	fds  map[string]*os.File // path -> descriptor kept open by syncOpen

	// vlogWrites reads the store's count of writes to the value log,
	// taken after each one reached the log (nil: every Sync fsyncs the
	// current value log). vlogSynced is the current value log as of its
	// last fsync and the count read before that fsync began: while the
	// count and the log are the same, nothing was written to it since,
	// and its fsync is skipped. A FILE_SYNC of a small file, whose
	// content lives in the write-ahead log, then costs one fdatasync, not
	// two (fdatasyncs of a clean and a dirty file at once take about as
	// long here as of two dirty ones).
	vlogWrites func() uint64
	vlogSynced struct {
		name   string
		writes uint64
	}
}

// logListing is the *.mem and *.vlog files of one directory listing.
type logListing struct {
	files  []logFile
	newest map[string]int64 // extension -> highest file id
	names  map[string]bool
}

type logFile struct {
	name, ext string
	id        int64
}

// dirWatch tells whether a directory's names may have changed.
type dirWatch interface {
	// changed reports whether a name was created, removed or renamed
	// since the last call (or since the watch began), or whether that is
	// unknown. A change made before the call returns is reported by this
	// call or an earlier one.
	changed() bool
	close() error
}

func newLogFiles(dir string) *logFiles {
	l := &logFiles{dir: dir, clean: map[string]bool{}, dirSeen: map[string]bool{}, watch: newDirWatch(dir), fds: map[string]*os.File{}}
	l.fsync = l.syncOpen
	return l
}

// close releases the directory watch.
func (l *logFiles) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.closeFds(nil)
	if l.watch == nil {
		return err
	}
	if werr := l.watch.close(); err == nil {
		err = werr
	}
	l.watch, l.list = nil, nil
	return err
}

// listing returns the directory's log files: the last listing while the
// watch has seen no name change since it was taken, else a new one. The
// watch is asked before listing, so a name created after it was asked is
// either in the new listing or reported by the next call.
func (l *logFiles) listing() (*logListing, error) {
	changed := l.watch == nil || l.watch.changed()
	if !changed && l.list != nil {
		return l.list, nil
	}
	l.list = nil
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, err
	}
	l.listings++
	ls := &logListing{newest: map[string]int64{}, names: make(map[string]bool, len(ents))}
	for _, e := range ents {
		ext := filepath.Ext(e.Name())
		if ext != ".mem" && ext != ".vlog" {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ext), 10, 64)
		if err != nil {
			continue
		}
		ls.names[e.Name()] = true
		ls.files = append(ls.files, logFile{e.Name(), ext, id})
		if n, ok := ls.newest[ext]; !ok || id > n {
			ls.newest[ext] = id
		}
	}
	l.list = ls
	return ls, nil
}

// syncOpen fsyncs path through a descriptor kept open while the file may
// need another fsync (it is the directory, or a log that is not yet clean),
// so that the fsync of a log being written, at every Sync, is one system
// call rather than an open, a stat, the fsync and a close.
func (l *logFiles) syncOpen(path string) error {
	l.fdmu.Lock()
	f := l.fds[path]
	if f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			l.fdmu.Unlock()
			return err
		}
		l.fds[path] = f
	}
	l.fdmu.Unlock()
	return syncFile(f, path == l.dir)
}

// closeFds closes the descriptors of files that no longer need an fsync:
// clean ones and ones gone from names (keeping a removed file's descriptor
// would keep its disk space; one Badger removes between two Syncs is
// closed by the second), or all of them if names is nil.
func (l *logFiles) closeFds(names map[string]bool) error {
	l.fdmu.Lock()
	defer l.fdmu.Unlock()
	var first error
	for path, f := range l.fds {
		if n := filepath.Base(path); names != nil && (path == l.dir || names[n] && !l.clean[n]) {
			continue
		}
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		delete(l.fds, path)
	}
	return first
}

// sync fsyncs what needs it; see logFiles.
func (l *logFiles) sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var vlogWrites uint64
	if l.vlogWrites != nil {
		vlogWrites = l.vlogWrites() // before the listing and the fsyncs
	}
	ls, err := l.listing()
	if err != nil {
		return err
	}
	files, newest, names := ls.files, ls.newest, ls.names
	var dirty []logFile
	for _, f := range files {
		if l.clean[f.name] {
			continue
		}
		if l.vlogWrites != nil && f.ext == ".vlog" && f.id == newest[".vlog"] &&
			l.vlogSynced.name == f.name && l.vlogSynced.writes == vlogWrites {
			continue // nothing written to it since its last fsync
		}
		dirty = append(dirty, f)
	}
	// At once: usually the newest write-ahead log and value log, whose
	// writebacks and device flushes then overlap (and a journaling
	// filesystem may commit them together).
	errs := make([]error, len(dirty))
	var wg sync.WaitGroup
	for i, f := range dirty[min(1, len(dirty)):] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = l.fsync(filepath.Join(l.dir, f.name))
		}()
	}
	if len(dirty) > 0 {
		errs[0] = l.fsync(filepath.Join(l.dir, dirty[0].name))
	}
	wg.Wait()
	for i, f := range dirty {
		if err := errs[i]; err != nil {
			if os.IsNotExist(err) {
				continue // flushed or collected meanwhile
			}
			return err
		}
		if f.id < newest[f.ext] {
			l.clean[f.name] = true
		} else if f.ext == ".vlog" {
			l.vlogSynced.name, l.vlogSynced.writes = f.name, vlogWrites
		}
	}
	for n := range l.clean {
		if !names[n] {
			delete(l.clean, n)
		}
	}
	// A failed close of a descriptor only read and fsynced through loses
	// nothing; the next listing opens the file again if it is still dirty.
	_ = l.closeFds(names)
	grown := false
	for n := range names {
		if !l.dirSeen[n] {
			grown = true
			break
		}
	}
	if grown {
		if err := l.fsync(l.dir); err != nil {
			return err
		}
		l.dirSeen = names
	}
	return nil
}

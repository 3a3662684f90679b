package kv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// ReclaimStats tells what ReclaimSpace gave back.
type ReclaimStats struct {
	// DiskBefore and DiskAfter are the bytes the store's files occupy on
	// disk (allocated blocks, as du counts them).
	DiskBefore int64 `json:"disk_before"`
	DiskAfter  int64 `json:"disk_after"`
	// Rewrites counts the value-log files rewritten (their live values
	// moved to the newest log, the file deleted).
	Rewrites int `json:"value_log_rewrites"`
}

// Reclaim options.
const (
	// reclaimDiscardRatio: a value log is rewritten when at least this
	// fraction of it is garbage, so at most 1/(1-ratio) of the live
	// values' size stays on disk.
	reclaimDiscardRatio = 0.2
	// maxRewrites bounds one ReclaimSpace call.
	maxRewrites = 10000
)

// Keys ReclaimSpace writes for itself; no other package uses the 0x00
// prefix.
var (
	ownPrefix   = []byte("\x00kv/") // all of them
	flushPrefix = []byte("\x00kv/flush")
	fillPrefix  = []byte("\x00kv/fill/")
)

// ReclaimSpace gives disk space back: Badger's value log keeps deleted
// values on disk until value-log GC rewrites the live rest of their file.
// Badger only learns which values are garbage when compactions drop them,
// and never collects the value log it is writing to, so ReclaimSpace:
//
//  1. rotates the value log when the one being written holds much (with
//     filler values it deletes at once), so that it can be collected too;
//  2. flushes the memtable by filling it with filler values it deletes at
//     once (Badger flushes a full memtable in the background; its only
//     flush on demand, DropPrefix, makes every write wait), waits for the
//     flush, and flattens the tree, so that every deleted value's garbage
//     is counted. When all the tree is in level 0 (a young store, where
//     Flatten does nothing), DropPrefix flushes and compacts level 0
//     instead: writes wait meanwhile (Update retries them), for a flush
//     and a small level 0. DropPrefix of its own keys then runs in any
//     case (after the filling, over a nearly empty memtable), so that no
//     filler entry stays in the tables: a settled store holds only what
//     its users wrote;
//  3. rewrites value logs, one file per step, until none holds enough
//     garbage (reclaimDiscardRatio, or more on a nearly full disk: see
//     rewriteRatio). Each step keeps an iterator open until
//     the moved values are synced, so Badger deletes the old file only once
//     the rewrite is durable (see runValueLogGC).
//
// Only one runs at a time; it returns ErrClosed on a closed store and does
// nothing in memory or read-only.
func (s *badgerStore) ReclaimSpace(ctx context.Context) (ReclaimStats, error) {
	var st ReclaimStats
	if err := s.use(func() error { return nil }); err != nil {
		return st, err
	}
	if s.opts.InMemory || s.roErr != nil {
		return st, nil
	}
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	var err error
	if st.DiskBefore, err = DiskUsage(s.dir); err != nil {
		return st, err
	}
	// On a disk inside the reserve the filler values are refused: the
	// log being written then stays, and the memtable is flushed through
	// DropPrefix, which needs no filler.
	if err := s.rotateValueLog(ctx); err != nil && !errors.Is(err, ErrNoSpace) {
		return st, fmt.Errorf("kv: reclaim space: rotate the value log: %w", err)
	}
	if !s.onlyLevel0() {
		if err := s.flushMemtable(ctx); err != nil && !errors.Is(err, ErrNoSpace) {
			return st, fmt.Errorf("kv: reclaim space: flush: %w", err)
		}
	}
	// DropPrefix flushes the memtable and compacts level 0: for a young
	// tree (level 0 is small, and Flatten leaves a tree of one level
	// alone) or a disk inside the reserve, that is the flush; after
	// flushMemtable, the memtable holds little but the last filler
	// transactions. Either way it also drops every filler key and
	// tombstone left in the tables: a filler value set in one memtable
	// and deleted in the next would otherwise stay in the tables (about a
	// thousand entries each time) until a compaction met both. A live
	// marker makes Badger see the prefix (it skips prefixes with no live
	// key).
	if err := s.Update(ctx, func(tx Txn) error { return tx.Set(flushPrefix, []byte{1}) }); err != nil {
		return st, fmt.Errorf("kv: reclaim space: %w", err)
	}
	if err := s.use(func() error { return mapErr(s.db.DropPrefix(ownPrefix)) }); err != nil {
		return st, fmt.Errorf("kv: reclaim space: flush and compact level 0: %w", err)
	}
	if err := s.use(func() error { return mapErr(s.db.Flatten(1)) }); err != nil {
		return st, fmt.Errorf("kv: reclaim space: compact: %w", err)
	}
	for st.Rewrites < maxRewrites {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		ratio, err := s.rewriteRatio()
		if err != nil {
			if st.Rewrites > 0 {
				break // it gave some back; the rest needs more room
			}
			return st, err
		}
		err = s.use(func() error { return s.runValueLogGC(ratio) })
		if errors.Is(err, badger.ErrNoRewrite) {
			break
		}
		if errors.Is(err, badger.ErrRejected) {
			// The background GC is running a step: wait for it.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			return st, fmt.Errorf("kv: reclaim space: value-log GC: %w", mapErr(err))
		}
		st.Rewrites++
	}
	st.DiskAfter, err = DiskUsage(s.dir)
	return st, err
}

// Rewrites on a nearly full disk.
const (
	// rewriteSlack is kept free beyond the moved values: their keys go to
	// the memtable's log and, later, to a table.
	rewriteSlack = 1 << 20
	// maxRewriteRatio is the highest discard ratio asked of a rewrite: a
	// file at least this much garbage moves at most 5 % of its size, and
	// a file that is all garbage moves nothing and is deleted whole.
	maxRewriteRatio = 0.95
)

// rewriteRatio returns the discard ratio for the next value-log rewrite.
// Badger writes the moved values through a mapping, and a full disk would
// kill the process, so a rewrite must never move more than the disk can
// take. With room for a whole file's values (and a quarter more) that is
// reclaimDiscardRatio. With less, the ratio rises so that the file Badger
// picks (the one with the most garbage, and only if it holds at least
// the ratio) moves at most what fits: on a full disk, whole files of
// garbage are deleted first, which frees space without taking any, and the
// ratio falls again as they go. Below the room that even a file of 5 %
// live values needs, it refuses with ErrNoSpace.
func (s *badgerStore) rewriteRatio() (float64, error) {
	if s.res.size == 0 {
		return reclaimDiscardRatio, nil
	}
	st, err := s.res.stat()
	if err != nil {
		return reclaimDiscardRatio, nil
	}
	size := float64(s.opts.ValueLogFileSize)
	room := float64(st.avail) - rewriteSlack
	ratio := 1 - room/(1.25*size)
	if ratio <= reclaimDiscardRatio {
		return reclaimDiscardRatio, nil
	}
	if ratio <= maxRewriteRatio {
		return ratio, nil
	}
	need := uint64(rewriteSlack + 1.25*(1-maxRewriteRatio)*size)
	return 0, noSpacef("cannot give space back: the filesystem of %s has %s free, and rewriting even a value log that is nearly all garbage may take %s; free space on it, then run gc again",
		s.dir, FormatBytes(st.avail), FormatBytes(need))
}

// rotateValueLog makes Badger start a new value log when the one it
// writes holds more than a sixteenth of a file, by writing filler values
// (an eighth of a file each) and deleting them in the same steps. Badger
// never collects the log it writes to.
func (s *badgerStore) rotateValueLog(ctx context.Context) error {
	fid, used, err := s.activeValueLog()
	if err != nil || used < s.opts.ValueLogFileSize/16 {
		return err
	}
	chunk := make([]byte, s.opts.ValueLogFileSize/8)
	for i := 0; i < 10; i++ {
		key := append(append([]byte(nil), fillPrefix...), strconv.Itoa(i)...)
		if err := s.Update(ctx, func(tx Txn) error { return tx.Set(key, chunk) }); err != nil {
			return err
		}
		if err := s.Update(ctx, func(tx Txn) error { return tx.Delete(key) }); err != nil {
			return err
		}
		if now, _, err := s.activeValueLog(); err != nil || now != fid {
			return err
		}
	}
	return nil
}

// flushMemtable fills the memtable with filler values, deleted in the
// next transaction each time, until Badger starts a new one, and waits
// until Badger has flushed the full one to a table (its log file goes).
func (s *badgerStore) flushMemtable(ctx context.Context) error {
	mem, _, err := s.newestFile(".mem")
	if err != nil || mem == 0 {
		return err
	}
	// Values stay in the memtable below the value threshold.
	val := make([]byte, max(min(s.opts.ValueThreshold-64, 960), 16))
	// Transactions stay well under Badger's limit (15 % of a memtable).
	batch := int(min(max(s.opts.MemTableSize/16/int64(len(val)), 1), 1024))
	keys := make([][]byte, batch)
	for i := range keys {
		keys[i] = append(append([]byte(nil), fillPrefix...), fmt.Sprintf("m%04d", i)...)
	}
	rotated := false
	for written := int64(0); written < 4*s.opts.MemTableSize && !rotated; written += int64(batch * len(val)) {
		if err := s.Update(ctx, func(tx Txn) error {
			for _, k := range keys {
				if err := tx.Set(k, val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if err := s.Update(ctx, func(tx Txn) error {
			for _, k := range keys {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		now, _, err := s.newestFile(".mem")
		if err != nil {
			return err
		}
		rotated = now != mem
	}
	// The flush runs in the background; readers may hold the memtable a
	// little longer. Waiting longer gains nothing: what the flush would
	// have given back waits for the next ReclaimSpace.
	old := filepath.Join(s.dir, fmt.Sprintf("%05d.mem", mem))
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if _, err := os.Stat(old); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// onlyLevel0 reports whether every table of the tree is in level 0.
func (s *badgerStore) onlyLevel0() bool {
	only := true
	s.use(func() error {
		for _, l := range s.db.Levels() {
			if l.Level > 0 && l.NumTables > 0 {
				only = false
			}
		}
		return nil
	})
	return only
}

// activeValueLog returns the id of the value log Badger writes to and the
// bytes allocated to it.
func (s *badgerStore) activeValueLog() (fid int64, used int64, err error) {
	return s.newestFile(".vlog")
}

// newestFile returns the highest id among Badger's files with extension
// ext (.vlog or .mem: the one being written) and the bytes allocated to
// it; 0 when there is none.
func (s *badgerStore) newestFile(ext string) (fid int64, used int64, err error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, 0, err
	}
	var name string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ext) {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ext), 10, 64)
		if err == nil && id >= fid {
			fid, name = id, e.Name()
		}
	}
	if name == "" {
		return 0, 0, nil
	}
	fi, err := os.Stat(filepath.Join(s.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return fid, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	return fid, allocated(fi), nil
}

// DiskUsage is the disk space the files under dir occupy: allocated
// blocks, as du counts them (Badger's logs are sparse: their size says
// little).
func DiskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			total += allocated(fi)
		}
		return nil
	})
	return total, err
}

func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

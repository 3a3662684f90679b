package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// SizeIterator is implemented by transactions that tell the size of a
// value without reading it (the Badger store's: a value in the value log
// is read from disk, its size is in the tree).
type SizeIterator interface {
	// IterateSizes calls fn with every key under prefix and the size of
	// its value, in key order, until fn returns false or an error.
	IterateSizes(prefix []byte, fn func(key []byte, size int64) (bool, error)) error
}

// IterateSizes calls fn with every key under prefix and the size of its
// value. Stores that cannot tell a size without the value (no
// SizeIterator) read the values.
func IterateSizes(tx Txn, prefix []byte, fn func(key []byte, size int64) (bool, error)) error {
	if s, ok := tx.(SizeIterator); ok {
		return s.IterateSizes(prefix, fn)
	}
	return tx.Iterate(prefix, nil, false, func(k, v []byte) (bool, error) { return fn(k, int64(len(v))) })
}

// IterateSizes implements SizeIterator.
func (t *badgerTxn) IterateSizes(prefix []byte, fn func(key []byte, size int64) (bool, error)) error {
	io := badger.DefaultIteratorOptions
	io.Prefix = prefix
	io.PrefetchValues = false
	it := t.t.NewIterator(io)
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		more, err := fn(item.Key(), valueSize(item))
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// valueSize returns the size of item's value without reading it. Badger's
// ValueSize guesses the length of a value-log entry's header; here it is
// worked out: the entry (vp.Len, Badger's EstimatedSize) is a header (meta
// and user-meta bytes, then the key's length with its timestamp, the
// value's length and the expiry as uvarints), the key with its 8-byte
// timestamp, the value and a CRC32.
func valueSize(item *badger.Item) int64 {
	klen := int64(len(item.Key()))
	est, guess := item.EstimatedSize(), item.ValueSize()
	if est-guess == klen {
		return max(guess, 0) // the value is in the tree: exact
	}
	rest := est - (klen + 8) - 4 - 2 - uvarintLen(uint64(klen+8)) - uvarintLen(item.ExpiresAt())
	for n := int64(1); n <= binary.MaxVarintLen64; n++ {
		if v := rest - n; v >= 0 && uvarintLen(uint64(v)) == n {
			return v
		}
	}
	return max(guess, 0)
}

func uvarintLen(v uint64) int64 {
	var b [binary.MaxVarintLen64]byte
	return int64(binary.PutUvarint(b[:], v))
}

// GarbageEstimator is implemented by stores that can estimate the disk
// space their logs hold for values no key reaches any more.
type GarbageEstimator interface {
	// ValueLogGarbage estimates the bytes of the value logs on disk that
	// hold no live value (deleted or overwritten values, ReclaimSpace's
	// filler): what rewriting every value log would give back at most.
	// It reads every key once (not the values).
	ValueLogGarbage(ctx context.Context) (int64, error)
}

// ValueLogGarbage implements GarbageEstimator: the value logs' allocated
// bytes minus the bytes the live values' entries take in them. Writes
// running meanwhile make it approximate.
func (s *badgerStore) ValueLogGarbage(ctx context.Context) (int64, error) {
	if s.opts.InMemory {
		return 0, nil
	}
	var live int64
	err := s.use(func() error {
		txn := s.db.NewTransaction(false)
		defer txn.Discard()
		io := badger.DefaultIteratorOptions
		io.PrefetchValues = false
		it := txn.NewIterator(io)
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			item := it.Item()
			// Values from the threshold up live in the value log, where
			// the entry (header, key, value, checksum) takes
			// EstimatedSize bytes.
			if item.ValueSize() >= s.opts.ValueThreshold {
				live += item.EstimatedSize()
			}
		}
		return nil
	})
	if err != nil {
		return 0, mapErr(err)
	}
	var logs int64
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".vlog") {
			continue
		}
		fi, err := os.Stat(filepath.Join(s.dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // rewritten meanwhile
		}
		if err != nil {
			return 0, err
		}
		logs += allocated(fi)
	}
	return max(logs-live, 0), nil
}

// DiskUser is implemented by stores whose files are on a local disk.
type DiskUser interface {
	// DiskUsage returns the bytes the store's files occupy on disk:
	// allocated blocks, as du counts them.
	DiskUsage() (int64, error)
}

// DiskUsage implements DiskUser; 0 for a store in memory.
func (s *badgerStore) DiskUsage() (int64, error) {
	if s.opts.InMemory {
		return 0, nil
	}
	return DiskUsage(s.dir)
}

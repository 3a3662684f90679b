package kv

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// TestReclaimSpaceLeavesNoFiller: after ReclaimSpace and a close, the
// tables hold no entry of ReclaimSpace's own keys (filler values, their
// tombstones, the flush marker) at any version, for a young tree and for
// a tree with levels (flushed by filling the memtable): each one left
// would be disk space a settled store keeps for nothing.
func TestReclaimSpaceLeavesNoFiller(t *testing.T) {
	for _, tree := range []bool{false, true} {
		t.Run(fmt.Sprint("tree=", tree), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := WithValueLogFileSize(BadgerOptions{GCInterval: -1}, 4<<20)
			if tree {
				opts.MemTableSize = 1 << 20
			}
			st, err := OpenBadger(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			s := st.(*badgerStore)
			small := bytes.Repeat([]byte("s"), 500)
			for i := 0; i < 24000; i += 100 {
				err := s.Update(ctx, func(tx Txn) error {
					for j := i; j < i+100; j++ {
						if err := tx.Set([]byte(fmt.Sprintf("s%06d", j)), small); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if tree {
				// The first reclaim moves the tree out of level 0.
				if _, err := s.ReclaimSpace(ctx); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 100; i++ {
					if err := s.Update(ctx, func(tx Txn) error { return tx.Set([]byte(fmt.Sprintf("s%06d", i)), small[:400]) }); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tree && s.onlyLevel0() {
				t.Fatal("the tree has no levels below 0: the test does not reach the flush by filling")
			}
			for round := 0; round < 2; round++ {
				if _, err := s.ReclaimSpace(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var own, users int
			err = db.View(func(tx *badger.Txn) error {
				io := badger.DefaultIteratorOptions
				io.AllVersions, io.PrefetchValues = true, false
				it := tx.NewIterator(io)
				defer it.Close()
				for it.Rewind(); it.Valid(); it.Next() {
					if bytes.HasPrefix(it.Item().Key(), []byte("\x00kv/")) {
						own++
					} else {
						users++
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if own != 0 || users != 24000 {
				t.Fatalf("after ReclaimSpace the tables hold %d entries of its own keys and %d others, want 0 and 24000", own, users)
			}
		})
	}
}

package cowfs

import (
	"context"
	"syscall"

	"github.com/branchnfs/branchnfs/kv"
)

// Every write of a block-reference key goes through refLog.set, inside a
// transaction run by updateRefs (or, for merges, committed under the
// tracker the same way). That is what keeps the block sweep honest: the
// sweep marks the content referenced in a snapshot, and deletes the rest
// except what writers referenced since (see Tracker). A reference written
// any other way to content that already exists, unreferenced, in the
// snapshot (a truncate or fold trim whose last block equals such content:
// storeBlock then writes no content) would let the sweep delete content a
// live file uses, and the file would read EIO for good.

// refLog collects the content hashes one transaction's block references
// use.
type refLog struct{ hashes [][]byte }

// set writes block reference ref under key (a data key) and logs every
// content hash it uses (refHashes).
func (r *refLog) set(tx kv.Txn, key, ref []byte) error {
	refHashes(ref, r.content)
	return tx.Set(key, ref)
}

// content logs hash h as used without writing a reference (content a
// later transaction of the same operation references).
func (r *refLog) content(h []byte) { r.hashes = append(r.hashes, append([]byte(nil), h...)) }

// updateRefs runs fn in a read-write transaction under the tracker, and
// records for a running sweep the hashes the committed attempt logged.
func (f *View) updateRefs(ctx context.Context, fn func(tx kv.Txn, refs *refLog) error) error {
	return updateRefsWith(ctx, f.store, f.tracker, fn)
}

// updateRefsWith is updateRefs for a store and tracker without a view.
func updateRefsWith(ctx context.Context, store kv.Store, tracker *Tracker, fn func(tx kv.Txn, refs *refLog) error) error {
	return tracker.commitWith(func(record func([][]byte)) error {
		var refs refLog
		err := store.Update(ctx, func(tx kv.Txn) error {
			refs.hashes = refs.hashes[:0] // a retried attempt starts over
			return fn(tx, &refs)
		})
		if err == nil {
			record(refs.hashes)
		}
		return err
	})
}

// updateData is update (without the namespace lock) for calls that may
// write block references.
func (f *View) updateData(op, name string, fn func(tx kv.Txn, st state, refs *refLog) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st, err := f.begin(true)
	if err != nil {
		return pathErr(op, name, err.(syscall.Errno))
	}
	f.dirty.Store(true) // before the commit: a racing fork must not miss it
	err = f.updateRefs(f.ctx, func(tx kv.Txn, refs *refLog) error { return fn(tx, st, refs) })
	return f.wrap(op, name, err)
}

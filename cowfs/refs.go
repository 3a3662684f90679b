package cowfs

import (
	"context"

	"github.com/branchnfs/branchnfs/kv"
)

// Every write of a block-reference key goes through refLog.set, inside a
// transaction run by updateRefs (or, for merges, committed under the
// tracker the same way). That is what keeps the block sweep honest: the
// sweep marks the content referenced in a snapshot, and deletes the rest
// except what writers referenced since (see sweepTracker). A reference
// written any other way to content that already exists, unreferenced, in the
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

// updateRefs is Store.updateRefs.
func (f *View) updateRefs(ctx context.Context, layers []LayerID, fn func(tx kv.Txn, refs *refLog) error) error {
	return f.s.updateRefs(ctx, layers, fn)
}

// updateRefs runs fn in a read-write transaction under the tracker, and
// records for a running sweep the hashes the committed attempt logged.
// fn may change block references of frozen layers or a top layer (fold,
// merge), and of those only of layers: the cached references of every
// stack holding one of them are not used from its start on, and dropped
// once it ends (readcache.go, topcache.go).
func (s *Store) updateRefs(ctx context.Context, layers []LayerID, fn func(tx kv.Txn, refs *refLog) error) error {
	s.frozen.begin(layers)
	defer s.frozen.end(layers)
	return s.updateTopRefs(ctx, fn)
}

// swapRefs is updateRefs for a change that swaps block references for
// others naming the same bytes (rechunk, coalesce): the caches of
// references keep what they hold, which reads the same bytes until a
// sweep deletes the old content; a READ that then finds it missing drops
// the caches and reads again without them (readInto), as it does after
// another server's rechunk. So a GC rechunking a file leaves the READs of
// it that hit the caches alone.
func (s *Store) swapRefs(ctx context.Context, fn func(tx kv.Txn, refs *refLog) error) error {
	return s.updateTopRefs(ctx, fn)
}

// updateTopRefs is updateRefs for a view's own writes, which change only
// its top layer and so leave the caches of frozen references alone (the
// view's write counts the change for the top-layer cache: View.write).
func (s *Store) updateTopRefs(ctx context.Context, fn func(tx kv.Txn, refs *refLog) error) error {
	return s.tracker.commitWith(func(record func([][]byte)) error {
		var refs refLog
		err := s.updateContent(ctx, func(tx kv.Txn) error {
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
	return f.write(op, name, func(st state) error {
		return f.s.updateTopRefs(f.ctx, func(tx kv.Txn, refs *refLog) error { return fn(tx, st, refs) })
	})
}

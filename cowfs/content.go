package cowfs

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
)

// Block and chunk content lives in one of two places, chosen by
// Options.Blobs when the Store opens: under the kv store's 'c' keys (the
// default), or in a blobs.Store (an S3 bucket, usually behind a disk
// cache), which the kv store then only references. Every content access
// goes through the functions here; the kv path costs what it did before
// (one GetFunc straight into the caller's buffer).
//
// With a blob store, a write uploads its content inside the callback of
// the transaction that references it (updateRefs), so the upload finishes
// before the reference commits, and it runs under the sweep tracker's read
// lock, so a sweep, which deletes under the write lock, either deleted the
// blob before the writer asked whether it exists (then the writer uploads
// it again) or sees the writer's reference (see sweepTracker). With
// several servers (Options.Leases) the writer first takes an intent for
// each content it relies on, stored or not (intend, xsweep.go), which
// other servers' sweeps respect.

// putContent stores data, whose BLAKE3 is h, unless the content store
// holds it already, and reports whether it stored it. tx is the
// transaction that will reference it.
func (s *Store) putContent(ctx context.Context, tx kv.Txn, h, data []byte) (bool, error) {
	if s.blobs == nil {
		if err := s.intend(ctx, tx, h); err != nil {
			return false, err
		}
		ok, err := tx.Has(contentKey(h))
		if err != nil || ok {
			return false, err
		}
		return true, tx.Set(contentKey(h), data)
	}
	if err := s.intend(ctx, tx, h); err != nil {
		return false, err
	}
	return s.putBlob(ctx, h, data)
}

// putBlob is putContent's upload to the blob store, for content the
// caller holds an intent for (with several servers).
func (s *Store) putBlob(ctx context.Context, h, data []byte) (bool, error) {
	k := blobs.Key(h)
	ok, err := s.blobs.Has(ctx, k)
	if err == nil && ok {
		return false, nil
	}
	if err == nil {
		err = s.blobs.Put(ctx, k, data)
	}
	if err != nil {
		return false, fmt.Errorf("cowfs: storing block content in the blob store: %w; nothing was written", err)
	}
	return true, nil
}

// getContent calls fn with the content of hash h, which fn must not keep.
// Absent content is kv.ErrNotFound whichever store holds it.
func (s *Store) getContent(ctx context.Context, tx kv.Txn, h []byte, fn func([]byte) error) error {
	if s.blobs == nil {
		return tx.GetFunc(contentKey(h), fn)
	}
	data, err := s.blobs.Get(ctx, blobs.Key(h))
	if errors.Is(err, blobs.ErrNotFound) {
		return fmt.Errorf("cowfs: block content %x: %w", h[:8], kv.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("cowfs: reading block content %x from the blob store: %w", h[:8], err)
	}
	return fn(data)
}

// listContent calls fn with the hash of every stored content, in no set
// order (sorted for the kv store). snap is the kv snapshot to list from
// when content is in the kv store.
func (s *Store) listContent(ctx context.Context, snap kv.Txn, fn func(h []byte) error) error {
	if s.blobs == nil {
		return snap.Iterate([]byte{pfxContent}, nil, true, func(k, _ []byte) (bool, error) {
			if h := k[1:]; len(h) == 32 {
				if err := fn(h); err != nil {
					return false, err
				}
			}
			return true, nil
		})
	}
	return s.blobs.List(ctx, func(k blobs.Key) error { return fn(k[:]) })
}

// contentSizes calls fn with every stored content's hash and size, until
// fn returns false: from the kv store's index (tx) or the blob store's
// listing.
func (s *Store) contentSizes(ctx context.Context, tx kv.Txn, fn func(h []byte, size int64) (bool, error)) error {
	if s.blobs == nil {
		return kv.IterateSizes(tx, []byte{pfxContent}, func(k []byte, size int64) (bool, error) {
			return fn(k[1:], size)
		})
	}
	sz, ok := s.blobs.(blobs.Sizer)
	if !ok {
		return fmt.Errorf("cowfs: the blob store %T does not list sizes", s.blobs)
	}
	stop := errors.New("stop")
	err := sz.ListSizes(ctx, func(k blobs.Key, n int64) error {
		more, err := fn(k[:], n)
		if err == nil && !more {
			err = stop
		}
		return err
	})
	if err == stop {
		return nil
	}
	return err
}

// ContentInBlobs reports whether content lives in a blob store
// (Options.Blobs) rather than in the kv store.
func (s *Store) ContentInBlobs() bool { return s.blobs != nil }

// setContent stores data, whose BLAKE3 is h, without asking first (the
// merge's content of trimmed blocks, which it just cut).
func (s *Store) setContent(ctx context.Context, tx kv.Txn, h, data []byte) error {
	if err := s.intend(ctx, tx, h); err != nil {
		return err
	}
	if s.blobs == nil {
		return tx.Set(contentKey(h), data)
	}
	if err := s.blobs.Put(ctx, blobs.Key(h), data); err != nil {
		return fmt.Errorf("cowfs: storing block content in the blob store: %w; nothing was written", err)
	}
	return nil
}

// blobUploads bounds the uploads one write runs at once: a 1 MiB WRITE is
// 32 blocks, each a Has and a Put of a few milliseconds to S3.
const blobUploads = 8

// putContents is putContent for several contents (content key, data)
// referenced by tx; with a blob store it runs up to blobUploads at once.
func (s *Store) putContents(ctx context.Context, tx kv.Txn, cs [][2][]byte) error {
	if s.blobs == nil || len(cs) < 2 {
		for _, c := range cs {
			if _, err := s.putContent(ctx, tx, c[0][1:], c[1]); err != nil {
				return err
			}
		}
		return nil
	}
	hs := make([][]byte, len(cs))
	for i, c := range cs {
		hs[i] = c[0][1:]
	}
	if err := s.intend(ctx, tx, hs...); err != nil { // one transaction for all
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(blobUploads)
	for _, c := range cs {
		g.Go(func() error {
			_, err := s.putBlob(gctx, c[0][1:], c[1])
			return err
		})
	}
	return g.Wait()
}

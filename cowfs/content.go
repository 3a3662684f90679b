package cowfs

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
// transaction that will reference it. With a blob store it asks first (a
// HEAD), to tell: the rechunk counts what it stored; writes upload
// without asking (putContents).
func (s *Store) putContent(ctx context.Context, tx kv.Txn, h, data []byte) (bool, error) {
	if s.blobs == nil {
		if err := s.intend(ctx, tx, h); err != nil {
			return false, err
		}
		k := contentKey(h)
		if fw, ok := tx.(kv.FixedWriter); ok {
			ok, err := fw.HasFixed(k)
			if err != nil || ok {
				return false, err
			}
			return true, fw.SetFixed(k, data)
		}
		ok, err := tx.Has(k)
		if err != nil || ok {
			return false, err
		}
		return true, tx.Set(k, data)
	}
	if err := s.intend(ctx, tx, h); err != nil {
		return false, err
	}
	ok, err := s.blobs.Has(ctx, blobs.Key(h))
	if err != nil {
		return false, fmt.Errorf("cowfs: storing block content in the blob store: %w; nothing was written", err)
	}
	if ok {
		s.known.add(blobs.Key(h))
		return false, nil
	}
	return true, s.putBlob(ctx, h, data)
}

// putBlob uploads content for which the caller holds an intent (with
// several servers), unless this Store knows the blob store holds it
// (known). It does not ask first: a blob store that can (blobs.Creator:
// S3's conditional PUT) uploads only what it lacks in one request, and
// any other takes the same bytes under the same key again. The HEAD
// before each new block's PUT was about a third of its S3 time
// (docs/benchmarks.md, "Scale-out backend").
func (s *Store) putBlob(ctx context.Context, h, data []byte) error {
	k := blobs.Key(h)
	if s.known.has(k) {
		return nil
	}
	var err error
	cr, ok := s.blobs.(blobs.Creator)
	switch {
	case s.blobWrite == blobWriteHead:
		if ok, err = s.blobs.Has(ctx, k); err == nil && !ok {
			err = s.blobs.Put(ctx, k, data)
		}
	case ok && s.blobWrite != blobWritePut:
		_, err = cr.Create(ctx, k, data)
	default:
		err = s.blobs.Put(ctx, k, data)
	}
	if err != nil {
		return fmt.Errorf("cowfs: storing block content in the blob store: %w; nothing was written", err)
	}
	s.known.add(k)
	return nil
}

// How putBlob uploads: only so that BenchmarkBlobWrite can compare.
const (
	blobWriteCreate = iota // Create when the blob store is a Creator (the default), else Put
	blobWriteHead          // Has, then Put when absent (as writes did)
	blobWritePut           // always Put
)

// knownBlobs remembers the blobs a Store uploaded or found lately, so
// that writing the same content again (a copy, a rewrite of the same
// bytes) sends nothing. Only with one server (no Options.Leases): its own
// sweep forgets what it deletes, under the tracker lock that writers
// upload under, while another server's sweep could delete a blob behind
// it. Two generations of at most knownMax entries each; a nil
// *knownBlobs knows nothing.
type knownBlobs struct {
	mu       sync.Mutex // protects the following
	cur, old map[blobs.Key]struct{}
}

// knownMax bounds each generation: 64Ki hashes (~4 MiB with the maps'
// overhead), 2 GiB of 32 KiB blocks.
const knownMax = 1 << 16

func newKnownBlobs() *knownBlobs {
	return &knownBlobs{cur: map[blobs.Key]struct{}{}}
}

func (kb *knownBlobs) has(k blobs.Key) bool {
	if kb == nil {
		return false
	}
	kb.mu.Lock()
	defer kb.mu.Unlock()
	if _, ok := kb.cur[k]; ok {
		return true
	}
	_, ok := kb.old[k]
	return ok
}

func (kb *knownBlobs) add(k blobs.Key) {
	if kb == nil {
		return
	}
	kb.mu.Lock()
	defer kb.mu.Unlock()
	if len(kb.cur) >= knownMax {
		kb.old, kb.cur = kb.cur, make(map[blobs.Key]struct{}, knownMax)
	}
	kb.cur[k] = struct{}{}
}

// forget drops k: the sweep is about to delete it.
func (kb *knownBlobs) forget(k blobs.Key) {
	if kb == nil {
		return
	}
	kb.mu.Lock()
	defer kb.mu.Unlock()
	delete(kb.cur, k)
	delete(kb.old, k)
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
// 32 blocks, each a Put of a few milliseconds to S3.
const blobUploads = 8

// putContents is putContent for several contents (content key, data)
// referenced by tx; with a blob store it runs up to blobUploads at once.
func (s *Store) putContents(ctx context.Context, tx kv.Txn, cs [][2][]byte) error {
	if len(cs) == 0 {
		return nil
	}
	if s.blobs == nil {
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
		g.Go(func() error { return s.putBlob(gctx, c[0][1:], c[1]) })
	}
	return g.Wait()
}

package cowfs

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
)

// Test-only API: tests build layer stacks by hand.

// NewLayerOver creates an empty layer over below and returns it.
func (s *Store) NewLayerOver(ctx context.Context, below LayerID) (LayerID, error) {
	l, err := s.NewLayerID(ctx)
	if err != nil {
		return 0, err
	}
	err = s.Update(ctx, func(tx *Txn) error { return tx.PutLayer(l, below) })
	return l, err
}

// pushLayer freezes f's top y under a new empty layer x, which becomes
// f's top.
func pushLayer(t testing.TB, f *View) (x, y LayerID) {
	t.Helper()
	y = f.Top()
	x, err := f.s.NewLayerOver(context.Background(), y)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetTop(x); err != nil {
		t.Fatal(err)
	}
	return x, y
}

// SetTop re-points the view at another layer stack (after a fork, commit or
// restore changed it). In-flight calls finish on the old stack first.
func (f *View) SetTop(top LayerID) error {
	stack, err := loadStack(f.ctx, f.store, top)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.setStackLocked(stack)
	f.mu.Unlock()
	return nil
}

// Top returns the view's top layer.
func (f *View) Top() LayerID {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.stack[0]
}

// BlockSize returns the data block size.
func (f *View) BlockSize() int { return int(f.bs) }

// CacheLen returns the number of entries in the view's inode cache.
func (f *View) CacheLen() int {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	return len(f.cache)
}

// Store returns the store the view is a view of.
func (f *View) Store() *Store { return f.s }

// openStore is Open for tests: it fails the test on error.
func openStore(t testing.TB, st kv.Store, opts Options) *Store {
	t.Helper()
	opts = testContent(t, opts)
	st, opts = testLeased(t, st, opts)
	s, err := Open(context.Background(), st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// overBlobs names the test that runs other tests of the package with
// content in a blob store (TestOverBlobs): openStore gives every store a
// test under it opens the same blob store, the disk cache over a Mem.
const overBlobs = "TestOverBlobs/"

// testBlobs holds the blob store of each test under TestOverBlobs, by
// test name.
var testBlobs sync.Map

// testContent sets opts.Blobs for a test running under TestOverBlobs:
// the same blob store for every store the test opens.
func testContent(t testing.TB, opts Options) Options {
	if opts.Blobs != nil || !strings.HasPrefix(t.Name(), overBlobs) && !strings.HasPrefix(t.Name(), overLeases) {
		return opts
	}
	if b, ok := testBlobs.Load(t.Name()); ok {
		opts.Blobs = b.(blobs.Store)
		return opts
	}
	c, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	testBlobs.Store(t.Name(), c)
	t.Cleanup(func() { testBlobs.Delete(t.Name()); c.Close() })
	opts.Blobs = c
	return opts
}

// storedContent returns the hashes of the content s holds, wherever it
// keeps it.
func storedContent(t testing.TB, s *Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := s.kv.View(context.Background(), func(tx kv.Txn) error {
		return s.listContent(context.Background(), tx, func(h []byte) error {
			out[string(h)] = true
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SetBlobWrite sets how s uploads blocks: "head" asks first whether each
// exists, "put" always uploads, "create" uploads what the blob store
// lacks in one request (a conditional PUT), "known" is "create" that
// skips what s uploaded lately (the default with one server).
func SetBlobWrite(s *Store, how string) {
	switch how {
	case "head":
		s.blobWrite = blobWriteHead
	case "put":
		s.blobWrite = blobWritePut
	}
	if how != "known" {
		s.known = nil
	}
}

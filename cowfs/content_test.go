package cowfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestOverBlobs runs the package's file, read, rechunk and sweep tests
// again with content in a blob store (openStore gives each store the
// disk cache over a blobs.Mem, see testContent).
func TestOverBlobs(t *testing.T) {
	runContentSuite(t)
}

// runContentSuite runs the tests that store and read content, which
// TestOverBlobs and TestOverLeases run again under other options.
func runContentSuite(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"SmokeLayers", TestSmokeLayers},
		{"DataAcrossLayers", TestDataAcrossLayers},
		{"KillSetID", TestKillSetID},
		{"PruneShadowed", TestPruneShadowed},
		{"RechunkReadsSame", TestRechunkReadsSame},
		{"WriteChunkedDedupes", TestWriteChunkedDedupes},
		{"ChunkReadFetchesOnce", TestChunkReadFetchesOnce},
		{"SweepKeepsChunks", TestSweepKeepsChunks},
		{"RechunkRaceSweep", TestRechunkRaceSweep},
		{"ReclaimRaceTruncate", TestReclaimRaceTruncate},
		{"ReclaimRaceFoldTrim", TestReclaimRaceFoldTrim},
		{"BlobContent", testBlobContent},
		{"SpaceCountsContent", TestSpaceCountsContent},
	} {
		t.Run(tc.name, tc.fn)
	}
}

// testBlobContent: under TestOverBlobs, content goes to the blob store
// and none to the kv store, and the sweep deletes unreferenced blobs and
// keeps referenced ones.
func testBlobContent(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, st, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	if !sto.ContentInBlobs() {
		t.Fatal("the store keeps content in the kv store")
	}
	r := rand.New(rand.NewPCG(5, 6))
	b, want := overGarbage(t, f, r)
	err := st.View(ctx, func(tx kv.Txn) error {
		return tx.Iterate([]byte{pfxContent}, nil, true, func(k, _ []byte) (bool, error) {
			return false, fmt.Errorf("content key %x in the kv store", k)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	before := storedContent(t, sto)
	sweepAround(t, sto, func() {})
	after := storedContent(t, sto)
	if len(after) >= len(before) {
		t.Fatalf("the sweep deleted no blob: %d before, %d after", len(before), len(after))
	}
	if got := readAll(t, f, b.Ino, 2*bs); !bytes.Equal(got, append(want, got[len(want):]...)) || len(got) != 2*bs {
		t.Fatalf("file b reads differently after the sweep")
	}
}

// failingBlobs is a blob store whose Put fails as an unreachable S3
// service does, and whose other methods pass through.
type failingBlobs struct {
	blobs.Store
	fail bool
}

func (b *failingBlobs) Put(ctx context.Context, k blobs.Key, data []byte) error {
	if b.fail {
		return fmt.Errorf("%w: PUT at s3://bkt/p (endpoint 127.0.0.1:9): connection refused", blobs.ErrUnavailable)
	}
	return b.Store.Put(ctx, k, data)
}

// TestBlobPutFails: a write whose upload fails returns the blob store's
// error (EAGAIN to the caller, which the NFS server answers with
// NFS3ERR_JUKEBOX: try again later; the blob store's error naming its
// endpoint in the log) and references nothing: the file keeps its old bytes and size,
// and the same write succeeds once the store is back.
func TestBlobPutFails(t *testing.T) {
	const bs = 4096
	fb := &failingBlobs{Store: blobs.NewMem()}
	var log bytes.Buffer
	f, _, _ := newTestFS(t, Options{BlockSize: bs, InlineMax: 64, Blobs: fb, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	old := randBytes(r, 2*bs)
	if _, err := f.WriteAt(a.Ino, old, 0); err != nil {
		t.Fatal(err)
	}
	fb.fail = true
	p := randBytes(r, 3*bs)
	_, err = f.WriteAt(a.Ino, p, bs)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("write with the blob store down: %v, want EAGAIN", err)
	}
	if !strings.Contains(log.String(), "blob store") || !strings.Contains(log.String(), "127.0.0.1:9") {
		t.Fatalf("the log says %q: want the blob store and its endpoint named", log.String())
	}
	if got := readAll(t, f, a.Ino, len(old)); !bytes.Equal(got, old) {
		t.Fatalf("after the failed write the file reads %d bytes (equal=%v), want its old %d", len(got), bytes.Equal(got, old), len(old))
	}
	fb.fail = false
	if _, err := f.WriteAt(a.Ino, p, bs); err != nil {
		t.Fatal(err)
	}
	want := append(old[:bs:bs], p...)
	if got := readAll(t, f, a.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatal("the write retried once the blob store is back reads differently")
	}
}

// TestSpaceCountsContent: Space sums the stored content by owner and the
// unreferenced rest, wherever the content is (TestOverBlobs runs it over
// a blob store).
func TestSpaceCountsContent(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{BlockSize: bs, InlineMax: 64})
	r := rand.New(rand.NewPCG(9, 10))
	leaveGarbage(t, f, "garbage", randBytes(r, bs), randBytes(r, 1000))
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, randBytes(r, 3*bs), 0); err != nil {
		t.Fatal(err)
	}
	snap := sto.Snapshot()
	defer snap.Discard()
	use, err := snap.Space(ctx, map[uint64][]LayerID{1: {f.Top()}}, false)
	if err != nil {
		t.Fatal(err)
	}
	// a's 3 blocks and garbage's first block are owner 1's; the truncated
	// 1000 bytes are unreferenced.
	if use.Unique[1] != 4*bs || use.Unreferenced != 1000 || use.ContentBytes != 4*bs+1000 {
		t.Fatalf("Space = %+v, want 4 blocks unique to owner 1 and 1000 bytes unreferenced", use)
	}
}

// fixedStore's transactions are kv.FixedWriters that count what cowfs
// tells them: content is a Fixed value, and a store that can remember
// where it put or found content is told so.
type fixedStore struct {
	kv.Store
	has, found, set atomic.Int64
}

func (c *fixedStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return c.Store.Update(ctx, func(tx kv.Txn) error { return fn(fixedTxn{tx, c}) })
}

type fixedTxn struct {
	kv.Txn
	c *fixedStore
}

func (t fixedTxn) HasFixed(k []byte) (bool, error) {
	ok, err := t.Txn.Has(k)
	t.c.has.Add(1)
	if ok {
		t.c.found.Add(1)
	}
	return ok, err
}

func (t fixedTxn) SetFixed(k, v []byte) error {
	t.c.set.Add(1)
	return t.Txn.Set(k, v)
}

// TestContentIsFixed: a write of new content sets every block with
// SetFixed, and a write of content stored already finds every block with
// HasFixed and sets none.
func TestContentIsFixed(t *testing.T) {
	fs := &fixedStore{Store: kvtest.NewStore(t)}
	_, f := newTestTree(t, fs, Options{})
	data := make([]byte, 4*int(f.bs))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, name := range []string{"a", "b"} {
		a, err := f.Create(RootIno, name, CreateUnchecked, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if n, _, err := f.ReadAt(a.Ino, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
			t.Fatalf("%s read back: %d bytes, %v", name, n, err)
		}
	}
	if has, found, set := fs.has.Load(), fs.found.Load(), fs.set.Load(); has != 8 || found != 4 || set != 4 {
		t.Fatalf("two files of the same 4 blocks: %d HasFixed (%d found), %d SetFixed; want 8 (4), 4", has, found, set)
	}
}

package cowfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// etcdLimits are etcd's default transaction limits as kv.Limits:
// 128 operations and compares, 1.5 MiB less request framing.
var etcdLimits = kv.Limits{Writes: 128, Reads: 128, Bytes: 3<<19 - 512, OpBytes: 24}

// ownFile creates name in the root of f, size bytes of the top layer's
// own 32 KiB blocks, each distinct, written 1 MiB per WRITE, and returns
// its inode and bytes.
func ownFile(t *testing.T, f *View, name string, size int) (InodeID, []byte) {
	t.Helper()
	a, err := f.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("truncate within the store's limits "), size/35+1)[:size]
	for off := 0; off < size; off += 4096 {
		binary.BigEndian.PutUint64(data[off:], uint64(off)) // distinct blocks
	}
	for off := 0; off < size; off += 1 << 20 {
		if _, err := f.WriteAt(a.Ino, data[off:min(off+1<<20, size)], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	return a.Ino, data
}

// checkFile reads ino through f and compares it with want, 1 MiB per READ.
func checkFile(t *testing.T, f *View, ino InodeID, want []byte) {
	t.Helper()
	a, err := f.GetAttr(ino)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != uint64(len(want)) {
		t.Fatalf("size %d, want %d", a.Size, len(want))
	}
	buf := make([]byte, 1<<20)
	for off := 0; off < len(want); off += len(buf) {
		n, _, err := f.ReadAt(ino, buf, int64(off))
		if err != nil {
			t.Fatal(err)
		}
		end := min(off+len(buf), len(want))
		if n != end-off {
			t.Fatalf("READ at %d returned %d bytes, want %d", off, n, end-off)
		}
		if !bytes.Equal(buf[:n], want[off:end]) {
			i := 0
			for buf[i] == want[off+i] {
				i++
			}
			t.Fatalf("byte %d reads %#x, want %#x", off+i, buf[i], want[off+i])
		}
	}
}

// TestTruncateWithinStoreLimits truncates files of 16 and 256 MiB of the
// top layer's own 32 KiB blocks (512 and 8,192 block references) on a
// store of etcd's limits, to 0 and to a size mid-block, then grows them
// again by SETATTR and by a WRITE past the end: the bytes before the cut
// read back, the rest reads as zeros, and no reference past the cut stays
// in the layer.
func TestTruncateWithinStoreLimits(t *testing.T) {
	const bs = 32 << 10
	sizes := []int{16 << 20, 256 << 20}
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, size := range sizes {
		for _, cut := range []int{0, size/2 + 1000} {
			t.Run(fmt.Sprintf("%dMiB-to-%d", size>>20, cut), func(t *testing.T) {
				st := kvtest.Limited(kvtest.NewDiskStore(t), etcdLimits)
				_, f := newTestTree(t, st, Options{BlockSize: bs})
				ino, data := ownFile(t, f, "f", size)
				top := f.Stack()[0]
				if n := countKeys(t, st, dataPrefix(top, ino)); n < size/bs {
					t.Fatalf("%d block references before the truncate, want at least %d", n, size/bs)
				}
				c := uint64(cut)
				if _, err := f.SetAttr(ino, SetAttr{Size: &c}); err != nil {
					t.Fatalf("truncate of %d MiB to %d on a store of etcd's limits: %v", size>>20, cut, err)
				}
				keep := (cut + bs - 1) / bs
				if n := countKeys(t, st, dataPrefix(top, ino)); n != keep {
					t.Errorf("%d block references after the truncate, want %d", n, keep)
				}
				want := append([]byte(nil), data[:cut]...)
				checkFile(t, f, ino, want)
				// Grow it back by SETATTR, then write 1 MiB past the end.
				s := uint64(size)
				if _, err := f.SetAttr(ino, SetAttr{Size: &s}); err != nil {
					t.Fatal(err)
				}
				want = append(want, make([]byte, size-cut)...)
				tail := bytes.Repeat([]byte{0xa5}, 1<<20)
				if _, err := f.WriteAt(ino, tail, int64(size)+bs/2); err != nil {
					t.Fatal(err)
				}
				want = append(append(want, make([]byte, bs/2)...), tail...)
				checkFile(t, f, ino, want)
			})
		}
	}
}

// dyingStore fails every Update once its allowance of successful ones
// runs out (allow < 0: no limit), like a server that died there.
type dyingStore struct {
	kv.Store
	allow atomic.Int64
}

var errDied = errors.New("injected failure")

func (s *dyingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if s.allow.Load() == 0 {
		return errDied
	}
	if err := s.Store.Update(ctx, fn); err != nil {
		return err
	}
	if s.allow.Load() > 0 {
		s.allow.Add(-1)
	}
	return nil
}

// TestTruncateInterrupted: a server that stops after a truncate's new
// size committed and before the blocks past it are purged leaves a
// consistent file: opened again, it reads its bytes up to the size, grows
// over zeros, the leftover references go at the layer's first write, and
// a sweep then deletes their content.
func TestTruncateInterrupted(t *testing.T) {
	const bs, size = 32 << 10, 16 << 20
	base := kvtest.Limited(kvtest.NewDiskStore(t), etcdLimits)
	fst := &dyingStore{Store: base}
	fst.allow.Store(-1)
	_, f := newTestTree(t, fst, Options{BlockSize: bs})
	ino, data := ownFile(t, f, "f", size)
	other, _ := ownFile(t, f, "g", 64<<10)
	top := f.Stack()[0]
	cut := uint64(5*bs + 100)
	fst.allow.Store(1) // the SETATTR's own transaction only
	if _, err := f.SetAttr(ino, SetAttr{Size: &cut}); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if n := countKeys(t, base, dataPrefix(top, ino)); n <= 6 {
		t.Fatalf("%d block references after the interrupted truncate: the test meant the purge to fail", n)
	}
	f.Close()

	// "Restart": a new Store and view over what the store holds.
	s2 := openStore(t, base, Options{BlockSize: bs})
	f2 := s2.View([]LayerID{top})
	defer f2.Close()
	want := append([]byte(nil), data[:cut]...)
	checkFile(t, f2, ino, want)
	buf := make([]byte, 100)
	if n, eof, err := f2.ReadAt(ino, buf, int64(cut)+bs); n != 0 || !eof || err != nil {
		t.Fatalf("READ past the size: %d bytes, eof %v, %v", n, eof, err)
	}
	// The layer's first write purges what the interrupted truncate left.
	if _, err := f2.WriteAt(other, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, base, dataPrefix(top, ino)); n != 6 {
		t.Errorf("%d block references after the view's first write, want 6", n)
	}
	if n := countKeys(t, base, stalePrefix(top)); n != 0 {
		t.Errorf("%d interrupted truncates still listed", n)
	}
	// The content only the leftovers named goes with a sweep: block 100's.
	h := blockHash(data[100*bs : 101*bs])
	if !hasContent(t, s2, h) {
		t.Fatal("block 100's content is gone before the sweep")
	}
	sweep(t, s2)
	if hasContent(t, s2, h) {
		t.Error("block 100's content stays after the sweep")
	}
	// Grown again, the file reads zeros past the cut.
	full := uint64(size)
	if _, err := f2.SetAttr(ino, SetAttr{Size: &full}); err != nil {
		t.Fatal(err)
	}
	checkFile(t, f2, ino, append(want, make([]byte, size-int(cut))...))
}

// TestTruncateInterruptedThenGrown: the first write after an interrupted
// truncate, growing the file over its leftovers, purges them first.
func TestTruncateInterruptedThenGrown(t *testing.T) {
	const bs, size = 32 << 10, 16 << 20
	base := kvtest.Limited(kvtest.NewDiskStore(t), etcdLimits)
	fst := &dyingStore{Store: base}
	fst.allow.Store(-1)
	_, f := newTestTree(t, fst, Options{BlockSize: bs})
	ino, data := ownFile(t, f, "f", size)
	top := f.Stack()[0]
	cut := uint64(3 * bs)
	fst.allow.Store(1)
	if _, err := f.SetAttr(ino, SetAttr{Size: &cut}); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	fst.allow.Store(-1)
	// The same view goes on: its next write grows the file by 8 MiB.
	if _, err := f.WriteAt(ino, []byte("end"), 8<<20); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte(nil), data[:cut]...), make([]byte, 8<<20-int(cut))...), "end"...)
	checkFile(t, f, ino, want)
	if n := countKeys(t, base, dataPrefix(top, ino)); n != 4 {
		t.Errorf("%d block references, want 4", n)
	}
}

func blockHash(p []byte) []byte {
	ref, _ := (&View{opts: Options{InlineMax: 0}}).blockRef(p)
	return ref[1:]
}

func hasContent(t *testing.T, s *Store, h []byte) bool {
	t.Helper()
	found := false
	err := s.kv.View(context.Background(), func(tx kv.Txn) error {
		return s.getContent(context.Background(), tx, h, func([]byte) error { found = true; return nil })
	})
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		t.Fatal(err)
	}
	return found
}

// TestMergeSkipsTruncateLeftovers: a merge of a layer holding the
// leftovers of an interrupted truncate copies only the blocks below the
// size, and the merged file, grown, reads zeros past the cut.
func TestMergeSkipsTruncateLeftovers(t *testing.T) {
	const bs, size = 32 << 10, 4 << 20
	ctx := context.Background()
	base := kvtest.Limited(kvtest.NewDiskStore(t), etcdLimits)
	fst := &dyingStore{Store: base}
	fst.allow.Store(-1)
	s, f0 := newTestTree(t, fst, Options{BlockSize: bs})
	l0 := f0.Stack()[0]
	over := func(below LayerID) LayerID {
		l, err := s.NewLayerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx *Txn) error { return tx.PutLayer(l, below) }); err != nil {
			t.Fatal(err)
		}
		return l
	}
	c, p := over(l0), over(l0)
	fc := s.View([]LayerID{c, l0})
	ino, data := ownFile(t, fc, "f", size)
	cut := uint64(2*bs + 7)
	fst.allow.Store(1)
	if _, err := fc.SetAttr(ino, SetAttr{Size: &cut}); err != nil {
		t.Fatal(err)
	}
	fst.allow.Store(-1)
	if n := countKeys(t, base, dataPrefix(c, ino)); n <= 3 {
		t.Fatalf("%d block references after the interrupted truncate: the test meant the purge to fail", n)
	}
	dst := over(p)
	if conflicts, _, err := s.Merge(ctx, []LayerID{c, l0}, []LayerID{p, l0}, []LayerID{l0}, dst, nil); err != nil || len(conflicts) > 0 {
		t.Fatalf("merge: %v %v", conflicts, err)
	}
	if n := countKeys(t, base, dataPrefix(dst, ino)); n != 3 {
		t.Errorf("the merge wrote %d block references, want 3", n)
	}
	fm := s.View([]LayerID{dst, p, l0})
	full := uint64(size)
	if _, err := fm.SetAttr(ino, SetAttr{Size: &full}); err != nil {
		t.Fatal(err)
	}
	checkFile(t, fm, ino, append(append([]byte(nil), data[:cut]...), make([]byte, size-int(cut))...))
}

// TestTruncateOnEtcd truncates a 16 MiB file of the top layer's own
// blocks (512 references) to 1 MiB + 1 on a real 3-member etcd cluster
// of default limits, then grows it: the truncate succeeds, the bytes
// before the cut read back, zeros after it.
func TestTruncateOnEtcd(t *testing.T) {
	const bs, size = 32 << 10, 16 << 20
	cluster := etcdtest.StartCluster(t, etcdtest.Options{})
	st := cluster.NewStore(t, etcdkv.Options{})
	_, f := newTestTree(t, st, Options{BlockSize: bs})
	ino, data := ownFile(t, f, "f", size)
	cut := uint64(1<<20 + 1)
	if _, err := f.SetAttr(ino, SetAttr{Size: &cut}); err != nil {
		t.Fatalf("truncate of 16 MiB to %d on etcd: %v", cut, err)
	}
	if n := countKeys(t, st, dataPrefix(f.Stack()[0], ino)); n != 33 {
		t.Errorf("%d block references after the truncate, want 33", n)
	}
	full := uint64(size)
	if _, err := f.SetAttr(ino, SetAttr{Size: &full}); err != nil {
		t.Fatal(err)
	}
	checkFile(t, f, ino, append(append([]byte(nil), data[:cut]...), make([]byte, size-int(cut))...))
}

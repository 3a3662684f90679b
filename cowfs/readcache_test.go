package cowfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// layerKeyStore records, per layer, how many of its inode record and
// block reference keys transactions read (point reads and keys iterated).
type layerKeyStore struct {
	kv.Store
	dataOnly bool // count block reference keys only
	mu       sync.Mutex
	read     map[LayerID]int
}

func (c *layerKeyStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	return c.Store.View(ctx, func(tx kv.Txn) error { return fn(layerKeyTxn{tx, c}) })
}

func (c *layerKeyStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return c.Store.Update(ctx, func(tx kv.Txn) error { return fn(layerKeyTxn{tx, c}) })
}

func (c *layerKeyStore) note(k []byte) {
	if len(k) > 9 && k[0] == pfxLayerData && (k[9] == kindData || k[9] == kindInode && !c.dataOnly) {
		c.mu.Lock()
		c.read[LayerID(binary.BigEndian.Uint64(k[1:9]))]++
		c.mu.Unlock()
	}
}

func (c *layerKeyStore) reset() map[LayerID]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.read
	c.read = map[LayerID]int{}
	return r
}

type layerKeyTxn struct {
	kv.Txn
	c *layerKeyStore
}

func (t layerKeyTxn) Get(k []byte) ([]byte, error) { t.c.note(k); return t.Txn.Get(k) }

func (t layerKeyTxn) GetFunc(k []byte, fn func([]byte) error) error {
	t.c.note(k)
	return t.Txn.GetFunc(k, fn)
}

func (t layerKeyTxn) Has(k []byte) (bool, error) { t.c.note(k); return t.Txn.Has(k) }

func (t layerKeyTxn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	return t.Txn.Iterate(prefix, start, keysOnly, func(k, v []byte) (bool, error) {
		t.c.note(k)
		return fn(k, v)
	})
}

// TestReadCacheNoFrozenKeys: a repeated READ of data in frozen layers reads
// none of their inode record or block reference keys, with or without a
// record of the file in the top layer (without one, it reads no key of
// the top either: the top-layer cache knows it holds no record), and
// sees what the top layer writes over it.
func TestReadCacheNoFrozenKeys(t *testing.T) {
	const bs = 4096
	cs := &layerKeyStore{Store: kvtest.NewStore(t), read: map[LayerID]int{}}
	_, f := newTestTree(t, cs, Options{BlockSize: bs})
	data := randBytes(rand.New(rand.NewPCG(1, 2)), 300*bs)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	_, y := pushLayer(t, f)
	_, z := pushLayer(t, f) // stack: top, z (empty), y (the data)
	buf := make([]byte, 100*bs)
	read := func(off int) map[LayerID]int {
		t.Helper()
		cs.reset()
		n, _, err := f.ReadAt(a.Ino, buf, int64(off))
		if err != nil || n != len(buf) || !bytes.Equal(buf, data[off:off+n]) {
			t.Fatalf("read at %d: %d bytes, %v, or not the bytes written", off, n, err)
		}
		return cs.reset()
	}
	if first := read(50 * bs); first[y] == 0 {
		t.Fatalf("the first READ read no key of the frozen layer: %v", first)
	}
	for _, off := range []int{50 * bs, 60*bs + 17} {
		got := read(off)
		if got[y] != 0 || got[z] != 0 {
			t.Fatalf("a repeated READ at %d read frozen layers' keys: %v (y=%d, z=%d)", off, got, y, z)
		}
		// The top holds no record, which the first READ cached.
		if got[f.Top()] != 0 {
			t.Fatalf("a repeated READ at %d read %d keys of the empty top layer, want 0", off, got[f.Top()])
		}
	}
	// A write in the top layer: the READ reads the top's keys and still
	// none of the frozen ones.
	edit := bytes.Repeat([]byte{'x'}, 3*bs)
	if _, err := f.WriteAt(a.Ino, edit, 70*bs+100); err != nil {
		t.Fatal(err)
	}
	copy(data[70*bs+100:], edit)
	got := read(50 * bs)
	if got[y] != 0 || got[z] != 0 || got[f.Top()] == 0 {
		t.Fatalf("a READ after a write in the top read keys %v, want the top's (%d) only", got, f.Top())
	}
}

// TestReadCacheModel runs random writes, truncates, new layers,
// checkpoints and restores, folds, prunes, rechunks of frozen layers and
// sweeps on one view (its caches kept across all of them), and checks the
// files against a model after each step, READs repeated so they hit the
// cache, through the view and through another one opened over the same
// stack, which shares the Store's cache. A small cache bound makes it
// start over often.
func TestReadCacheModel(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	for _, cacheBytes := range []int{0, 3000} {
		for seed := range 3 {
			t.Run(fmt.Sprint(cacheBytes, "/", seed), func(t *testing.T) {
				sto, f := newTestTree(t, kvtest.NewStore(t), Options{BlockSize: bs, InlineMax: 64, BlockCacheBytes: cacheBytes})
				r := rand.New(rand.NewPCG(uint64(seed), 99))
				fm := newFileModel(t, f)
				var inos []InodeID
				for i := range 2 {
					inos = append(inos, fm.create(fmt.Sprint("f", i), randBytes(r, 100*bs+r.IntN(bs))))
				}
				checkpoints := map[LayerID]map[InodeID][]byte{}
				for step := range 60 {
					ino := inos[r.IntN(len(inos))]
					size := len(fm.files[ino])
					stack := f.Stack()
					var op string
					switch k := r.IntN(11); {
					case k < 3:
						off := r.IntN(size + 2*bs)
						n := 1 + r.IntN(20*bs)
						fm.write(ino, off, randBytes(r, n))
						op = fmt.Sprintf("write of %d at %d", n, off)
					case k == 3:
						sz := r.IntN(size + 4*bs)
						fm.truncate(ino, sz)
						op = fmt.Sprintf("truncate to %d", sz)
					case k == 4 && len(stack) < 5:
						pushLayer(t, f)
						op = "new layer"
					case k == 5:
						// A checkpoint freezes the top and keeps it.
						_, y := pushLayer(t, f)
						saved := map[InodeID][]byte{}
						for i, b := range fm.files {
							saved[i] = bytes.Clone(b)
						}
						checkpoints[y] = saved
						op = "checkpoint"
					case k == 6 && len(checkpoints) > 0:
						cps := slices.Sorted(maps.Keys(checkpoints))
						c := cps[r.IntN(len(cps))]
						top, err := sto.NewLayerOver(ctx, c)
						if err != nil {
							t.Fatal(err)
						}
						if err := f.SetTop(top); err != nil {
							t.Fatal(err)
						}
						for i, b := range checkpoints[c] {
							fm.files[i] = bytes.Clone(b)
						}
						op = "restore"
					case k == 7 && len(stack) >= 3 && checkpoints[stack[1]] == nil && checkpoints[stack[2]] == nil:
						// Fold the frozen x into y below it, with the view
						// reading through both meanwhile, then re-point
						// the top at y.
						top, x, y := stack[0], stack[1], stack[2]
						checkFiles(t, fm, "before the fold", bs)
						if err := sto.FoldDown(ctx, x, y); err != nil {
							t.Fatal(err)
						}
						checkFiles(t, fm, "after the fold, before the re-pointing", bs)
						if err := sto.Update(ctx, func(tx *Txn) error { return tx.PutLayer(top, y) }); err != nil {
							t.Fatal(err)
						}
						if err := f.SetTop(top); err != nil {
							t.Fatal(err)
						}
						if _, err := sto.DeleteLayer(ctx, x); err != nil {
							t.Fatal(err)
						}
						op = "fold"
					case k == 8 && len(stack) >= 2 && checkpoints[stack[1]] == nil:
						if _, err := sto.PruneShadowed(ctx, stack[0], stack[1]); err != nil {
							t.Fatal(err)
						}
						op = "prune of the layer below"
					case k == 9 && len(stack) >= 2:
						l := stack[1+r.IntN(len(stack)-1)]
						if _, err := sto.Rechunk(ctx, l, 1<<40); err != nil {
							t.Fatal(err)
						}
						op = "rechunk of a frozen layer"
					default:
						sweep(t, sto)
						op = "sweep"
					}
					checkFiles(t, fm, fmt.Sprintf("step %d (%s)", step, op), bs)
					// A view opened afresh over the same stack shares
					// the cache f filled and fills it for f.
					g := sto.View(f.Stack())
					checkFiles(t, &fileModel{t: t, f: g, files: fm.files}, fmt.Sprintf("step %d (%s), another view", step, op), bs)
					g.Close()
				}
			})
		}
	}
}

// TestReadCacheSharedByViews: the frozen references one view resolved
// serve the READs of every view over the same frozen layers, whatever
// its top: a view opened again, or a sibling branch's. The first READ
// through another view reads no block reference of the frozen layers
// (only, once per view, their records of the inode).
func TestReadCacheSharedByViews(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	cs := &layerKeyStore{Store: kvtest.NewStore(t), dataOnly: true, read: map[LayerID]int{}}
	sto, f := newTestTree(t, cs, Options{BlockSize: bs})
	data := randBytes(rand.New(rand.NewPCG(3, 4)), 200*bs)
	a, err := f.Create(RootIno, "a", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	_, y := pushLayer(t, f)
	_, z := pushLayer(t, f) // stack: top, z (empty), y (the data)
	read := func(v *View) map[LayerID]int {
		t.Helper()
		buf := make([]byte, len(data))
		cs.reset()
		n, _, err := v.ReadAt(a.Ino, buf, 0)
		if err != nil || n != len(buf) || !bytes.Equal(buf, data) {
			t.Fatalf("read: %d bytes, %v, or not the bytes written", n, err)
		}
		return cs.reset()
	}
	if first := read(f); first[y] == 0 {
		t.Fatalf("the first READ read no key of the frozen layer: %v", first)
	}
	sibling, err := sto.NewLayerOver(ctx, z)
	if err != nil {
		t.Fatal(err)
	}
	for name, stack := range map[string][]LayerID{
		"the same stack":  f.Stack(),
		"a sibling's top": {sibling, z, y},
	} {
		t.Run(name, func(t *testing.T) {
			g := sto.View(stack)
			defer g.Close()
			if got := read(g); got[y] != 0 || got[z] != 0 {
				t.Fatalf("a new view's first READ read frozen layers' block references: %v (y=%d, z=%d)", got, y, z)
			}
		})
	}
}

// TestReadCacheLayerChanges: a rechunk swaps block references for others
// to the same bytes and leaves the cached ones in use, for every view,
// until a sweep deletes the content they name: the READ that finds it
// missing then refills the cache from the store, and the next READ hits
// it again. Rechunking a layer no stack of the views holds leaves their
// cache alone.
func TestReadCacheLayerChanges(t *testing.T) {
	const bs = 4096
	ctx := context.Background()
	cs := &layerKeyStore{Store: kvtest.NewStore(t), dataOnly: true, read: map[LayerID]int{}}
	sto, f := newTestTree(t, cs, Options{BlockSize: bs})
	data := randBytes(rand.New(rand.NewPCG(5, 6)), 200*bs)
	write := func(v *View, name string) InodeID {
		t.Helper()
		a, err := v.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.WriteAt(a.Ino, data, 0); err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	ino := write(f, "a")
	_, y := pushLayer(t, f) // stack: top, y (the data)
	g := sto.View(f.Stack())
	defer g.Close()
	// Another tree, whose layer no stack of f or g holds.
	_, other := newTestTree(t, cs, Options{BlockSize: bs})
	write(other, "b")
	_, w := pushLayer(t, other)
	read := func(v *View, when string) map[LayerID]int {
		t.Helper()
		buf := make([]byte, len(data))
		cs.reset()
		n, _, err := v.ReadAt(ino, buf, 0)
		if err != nil || n != len(buf) || !bytes.Equal(buf, data) {
			t.Fatalf("%s: read %d bytes, %v, or not the bytes written", when, n, err)
		}
		return cs.reset()
	}
	read(f, "first read")
	rechunk := func(l LayerID) {
		t.Helper()
		rs, err := sto.Rechunk(ctx, l, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if rs.Blocks == 0 {
			t.Fatalf("rechunking layer %d swapped nothing (%+v): the test set-up is wrong", l, rs)
		}
	}
	rechunk(w)
	for _, v := range []*View{f, g} {
		if got := read(v, "after another layer's rechunk"); got[y] != 0 {
			t.Fatalf("a READ after rechunking a layer outside the stack read %d block references of the frozen layer, want 0", got[y])
		}
	}
	rechunk(y)
	for _, v := range []*View{f, g} {
		if got := read(v, "after the frozen layer's rechunk"); got[y] != 0 {
			t.Fatalf("a READ after rechunking the frozen layer read %d of its block references, want 0: the cached ones read the same bytes", got[y])
		}
	}
	sweep(t, sto) // the plain blocks the rechunk replaced are gone
	if got := read(g, "after the sweep"); got[y] == 0 {
		t.Fatal("a READ after the sweep read none of the frozen layer's block references: it cannot have read the content it names")
	}
	if got := read(f, "again"); got[y] != 0 {
		t.Fatalf("a READ after the refill read %d block references of the frozen layer, want 0", got[y])
	}
}

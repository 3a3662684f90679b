package cowfs

import (
	"bytes"
	"context"
	"testing"

	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestDeletedLayersForgotten: branch after branch over the same frozen
// layer writes and reads a file in its own top layer, which is then
// deleted (an aborted branch reclaimed). The frozen-reference cache keeps
// no record of the deleted layers: what it holds per layer stays at the
// layers that live, however many lived and ended.
func TestDeletedLayersForgotten(t *testing.T) {
	ctx := context.Background()
	sto, f := newTestTree(t, kvtest.NewStore(t), Options{BlockSize: 4096})
	data := bytes.Repeat([]byte("x"), 3*4096)
	a, err := f.Create(RootIno, "base", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	base := f.Top()
	const lifetimes = 300 // fewer than maxChangedLayers, which would hide a leak
	buf := make([]byte, len(data))
	for i := range lifetimes {
		l, err := sto.NewLayerOver(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		v := sto.View([]LayerID{l, base})
		b, err := v.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.WriteAt(b.Ino, data[:4096], 0); err != nil {
			t.Fatal(err)
		}
		for _, ino := range []InodeID{a.Ino, b.Ino} {
			if _, _, err := v.ReadAt(ino, buf, 0); err != nil {
				t.Fatalf("lifetime %d: read: %v", i, err)
			}
		}
		v.Close()
		if _, err := sto.DeleteLayer(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	sto.frozen.mu.Lock()
	n := len(sto.frozen.layers)
	sto.frozen.mu.Unlock()
	t.Logf("after %d layer lifetimes the frozen-reference cache records changes of %d layers", lifetimes, n)
	if n > 1 {
		t.Fatalf("after %d layers were created and deleted the frozen-reference cache records changes of %d layers, want at most 1 (the base)", lifetimes, n)
	}
	// The base's file still reads through the cache.
	if n, _, err := f.ReadAt(a.Ino, buf, 0); err != nil || n != len(data) || !bytes.Equal(buf, data) {
		t.Fatalf("read of the base's file after the lifetimes: %d bytes, %v", n, err)
	}
}

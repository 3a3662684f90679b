package cowfs

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestNewTreeWithIsAtomic: the caller's record and the new tree are stored
// in one transaction, so a failing callback leaves neither.
func TestNewTreeWithIsAtomic(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, kvtest.NewStore(t), Options{})
	boom := errors.New("boom")
	var got LayerID
	_, err := s.NewTree(ctx, 0o755, 0, 0, func(tx *Txn, l LayerID) error {
		got = l
		if err := tx.KV().Set([]byte("Xrecord"), []byte("v")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("NewTree: %v, want the callback's error", err)
	}
	if _, err := s.Stack(ctx, got); err == nil {
		t.Fatalf("layer %d exists after a failed NewTree", got)
	}
	err = s.KV().View(ctx, func(tx kv.Txn) error {
		_, err := tx.Get([]byte("Xrecord"))
		return err
	})
	if !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("the callback's record after a failed NewTree: %v, want kv.ErrNotFound", err)
	}

	var rec LayerID
	l, err := s.NewTree(ctx, 0o700, 7, 8, func(tx *Txn, l LayerID) error {
		rec = l
		return tx.KV().Set([]byte("Xrecord"), []byte("v"))
	})
	if err != nil || rec != l {
		t.Fatalf("NewTree = %d, %v; the callback saw %d", l, err, rec)
	}
	a, err := s.View([]LayerID{l}).GetAttr(RootIno)
	if err != nil || a.Type != TypeDir || a.Mode != 0o700 || a.UID != 7 || a.GID != 8 {
		t.Fatalf("root of the new tree: %+v, %v", a, err)
	}
}

// TestLayerGraph: Referrers, Reachable, Unreachable and Repoint agree with
// the layers stored.
func TestLayerGraph(t *testing.T) {
	ctx := context.Background()
	_, _, s := newTestFS(t, Options{})
	var base LayerID
	if err := s.Read(ctx, func(tx *Txn) error {
		return eachLayer(tx.tx, true, func(l, _ LayerID) (bool, error) { base = l; return false, nil })
	}); err != nil {
		t.Fatal(err)
	}
	over := func(below LayerID) LayerID {
		t.Helper()
		l, err := s.NewLayerOver(ctx, below)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := over(base)
	b, c := over(a), over(a)
	d := over(base) // no root reaches it
	read := func(fn func(tx *Txn) error) {
		t.Helper()
		if err := s.Read(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	read(func(tx *Txn) error {
		refs, err := tx.Referrers()
		if err != nil {
			return err
		}
		if refs[base] != 2 || refs[a] != 2 || refs[b] != 0 || refs[d] != 0 {
			t.Errorf("referrers %v, want base 2, a 2, b 0, d 0", refs)
		}
		live, err := tx.Reachable([]LayerID{b, c})
		if err != nil {
			return err
		}
		if want := []LayerID{base, a, b, c}; !slices.Equal(live, want) {
			t.Errorf("reachable from b and c: %v, want %v", live, want)
		}
		dead, err := tx.Unreachable([]LayerID{b, c})
		if err != nil {
			return err
		}
		if want := []LayerID{d}; !slices.Equal(dead, want) {
			t.Errorf("unreachable from b and c: %v, want %v", dead, want)
		}
		return nil
	})
	overA, err := s.LayersOver(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx *Txn) error { return tx.Repoint(a, base, overA) }); err != nil {
		t.Fatal(err)
	}
	read(func(tx *Txn) error {
		for _, l := range []LayerID{b, c} {
			if below, err := tx.Below(l); err != nil || below != base {
				t.Errorf("after Repoint, below %d: %d, %v, want %d", l, below, err, base)
			}
		}
		refs, err := tx.Referrers()
		if err != nil {
			return err
		}
		if refs[base] != 4 || refs[a] != 0 {
			t.Errorf("referrers after Repoint %v, want base 4 (a, b, c, d), a 0", refs)
		}
		return nil
	})
}

package cowfs

import (
	"context"
	"fmt"
	"testing"
)

// narrowSlots makes every name hash to one of a few slots, so tests can
// build probe chains; it restores the full hash when the test ends.
func narrowSlots(t *testing.T, mask uint64) {
	t.Helper()
	old := slotMask
	slotMask = mask
	t.Cleanup(func() { slotMask = old })
}

// colliding returns n distinct names whose first probe slot is the same.
func colliding(t *testing.T, n int) []string {
	t.Helper()
	by := map[uint64][]string{}
	for i := 0; i < 10000; i++ {
		name := fmt.Sprintf("n%d", i)
		s := nameSlot(name)
		by[s] = append(by[s], name)
		if len(by[s]) == n {
			return by[s]
		}
	}
	t.Fatalf("no %d colliding names", n)
	return nil
}

func TestRenameAlongProbeChain(t *testing.T) {
	narrowSlots(t, 0xff)
	f, _, _ := newTestFS(t, Options{})
	names := colliding(t, 2)
	a, b := names[0], names[1]
	if _, err := f.Create(RootIno, a, CreateGuarded, NewAttr{Mode: 0o644}, 0); err != nil {
		t.Fatal(err)
	}
	// b's first slot is a's, so it lands on the next one; a's slot must
	// stay a whiteout or b falls off its probe chain.
	if err := f.Rename(RootIno, a, RootIno, b); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Lookup(RootIno, b); err != nil {
		t.Fatalf("lookup %s after rename %s -> %s: %v", b, a, b, err)
	}
	if _, err := f.Lookup(RootIno, a); err == nil {
		t.Fatalf("%s still exists after the rename", a)
	}
	ents, _, err := f.ReadDir(RootIno, 0, 10)
	if err != nil || len(ents) != 1 || ents[0].Name != b {
		t.Fatalf("readdir = %v, %v; want [%s]", ents, err, b)
	}
}

func TestFoldKeepsWhiteoutInProbeChain(t *testing.T) {
	narrowSlots(t, 0xff)
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{})
	names := colliding(t, 3)
	for _, n := range names {
		if _, err := f.Create(RootIno, n, CreateGuarded, NewAttr{Mode: 0o644}, 0); err != nil {
			t.Fatal(err)
		}
	}
	x, y := pushLayer(t, f)
	// Removing the head of the chain leaves a whiteout in x that the rest
	// of the chain depends on.
	if err := f.Unlink(RootIno, names[0]); err != nil {
		t.Fatal(err)
	}
	if err := sto.FoldDown(ctx, x, y); err != nil {
		t.Fatal(err)
	}
	g, err := sto.OpenView(ctx, y)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names[1:] {
		if _, err := g.Lookup(RootIno, n); err != nil {
			t.Errorf("lookup %s after folding the removal of %s into the bottom layer: %v", n, names[0], err)
		}
	}
	if _, err := g.Lookup(RootIno, names[0]); err == nil {
		t.Errorf("%s is back after the fold", names[0])
	}
}

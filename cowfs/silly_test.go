package cowfs

import (
	"context"
	"errors"
	"syscall"
	"testing"
)

func TestIsSillyName(t *testing.T) {
	for name, want := range map[string]bool{
		".nfs.0000abcd.0001":               true,  // macOS: ticks, pid
		".nfs.0000abcd.1869f":              true,  // a pid wider than %04x
		".nfs.0000abcd.00014.4":            true,  // FreeBSD's suffix
		".nfs00000000000f424000000001":     true,  // Linux: fileid, counter
		".nfs.0000abcd.001":                false, // pid too short
		".nfs.0000abc.0001":                false,
		".nfs.0000abcd.0001.txt":           false,
		".nfs0000000000f424000000001":      false, // 23 digits
		".nfs00000000000f42400000000g":     false,
		".nfsrc":                           false,
		"nfs.0000abcd.0001":                false,
		".DS_Store":                        false,
		".nfs.0000abcd.0001\u0301":         false,
		".nfs00000000000f424000000001.bak": false,
	} {
		if got := IsSillyName(name); got != want {
			t.Errorf("IsSillyName(%q) = %v, want %v", name, got, want)
		}
	}
}

// Folding a layer keeps its silly index, so a later fast-path commit
// still finds the entries it names.
func TestFoldKeepsSillyIndex(t *testing.T) {
	ctx := context.Background()
	f, _, sto := newTestFS(t, Options{})
	x, y := pushLayer(t, f)
	a, err := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Rename(RootIno, "f", RootIno, ".nfs.00000001.0002"); err != nil {
		t.Fatal(err)
	}
	if err := sto.FoldDown(ctx, x, y); err != nil {
		t.Fatal(err)
	}
	g, err := sto.OpenView(ctx, y)
	if err != nil {
		t.Fatal(err)
	}
	g.Lock()
	var gone []InodeID
	err = sto.Update(ctx, func(tx *Txn) error {
		var err error
		gone, err = g.DropSillyLocked(tx, []LayerID{y})
		return err
	})
	g.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 1 || gone[0] != a.Ino {
		t.Fatalf("dropped %v, want [%d]", gone, a.Ino)
	}
	if _, err := g.Lookup(RootIno, ".nfs.00000001.0002"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("silly file after drop: %v", err)
	}
}

package cowfs

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

const (
	nfc = "caf\u00e9"  // é as one code point, as shells send it
	nfd = "cafe\u0301" // e + combining acute, as Cocoa apps send it
)

func listNames(t *testing.T, f *View, dir InodeID) []string {
	t.Helper()
	ents, _, err := f.ReadDir(dir, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name)
	}
	return out
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func TestNamesFormInsensitive(t *testing.T) {
	if nfc == nfd || norm.NFC.String(nfd) != nfc {
		t.Fatal("test names are not two forms of one name")
	}
	f, _, _ := newTestFS(t, Options{})
	a, err := f.Create(RootIno, nfc, CreateExclusive, NewAttr{Mode: 0o644}, 7)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Lookup(RootIno, nfd)
	if err != nil || got.Ino != a.Ino {
		t.Fatalf("lookup of the NFD form = %v, %v; want ino %d", got.Ino, err, a.Ino)
	}
	if got.Name != nfc {
		t.Errorf("attr name = %q, want the stored form %q", got.Name, nfc)
	}
	if names := listNames(t, f, RootIno); len(names) != 1 || names[0] != nfc {
		t.Errorf("readdir = %q, want [%q]", names, nfc)
	}
	_, err = f.Create(RootIno, nfd, CreateExclusive, NewAttr{Mode: 0o644}, 8)
	wantErrno(t, "exclusive create of the other form", err, syscall.EEXIST)
	if again, err := f.Create(RootIno, nfd, CreateExclusive, NewAttr{Mode: 0o644}, 7); err != nil || again.Ino != a.Ino {
		t.Errorf("exclusive retry with the same verifier in the other form = %v, %v", again.Ino, err)
	}
	_, err = f.Create(RootIno, nfd, CreateGuarded, NewAttr{Mode: 0o644}, 0)
	wantErrno(t, "guarded create of the other form", err, syscall.EEXIST)
	if u, err := f.Create(RootIno, nfd, CreateUnchecked, NewAttr{Mode: 0o644}, 0); err != nil || u.Ino != a.Ino {
		t.Errorf("unchecked create of the other form = %v, %v; want the existing file", u.Ino, err)
	}
	_, err = f.Mkdir(RootIno, nfd, NewAttr{Mode: 0o755})
	wantErrno(t, "mkdir of the other form", err, syscall.EEXIST)
	_, err = f.Link(a.Ino, RootIno, nfd)
	wantErrno(t, "link to the other form", err, syscall.EEXIST)
	if names := listNames(t, f, RootIno); len(names) != 1 {
		t.Fatalf("twins after creates in the other form: %q", names)
	}

	// Rename to the other spelling of its own name stores the new form.
	if err := f.Rename(RootIno, nfc, RootIno, nfd); err != nil {
		t.Fatal(err)
	}
	if names := listNames(t, f, RootIno); len(names) != 1 || names[0] != nfd {
		t.Errorf("readdir after respelling = %q, want [%q]", names, nfd)
	}
	if p, err := f.PathOf(a.Ino); err != nil || p != nfd {
		t.Errorf("path after respelling = %q, %v", p, err)
	}
	// Rename from one form, onto an existing file named in the other.
	b, err := f.Create(RootIno, "b", CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Rename(RootIno, "b", RootIno, nfc); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Lookup(RootIno, nfd); err != nil || got.Ino != b.Ino {
		t.Errorf("after renaming b over the other form: lookup = %v, %v; want ino %d", got.Ino, err, b.Ino)
	}
	if _, err := f.GetAttr(a.Ino); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("the replaced file still exists: %v", err)
	}
	if names := listNames(t, f, RootIno); len(names) != 1 || names[0] != nfc {
		t.Errorf("readdir = %q, want [%q]", names, nfc)
	}
	// Rename away using the other form, then remove using the other form.
	if err := f.Rename(RootIno, nfd, RootIno, "c"); err != nil {
		t.Fatal(err)
	}
	if p, err := f.PathOf(b.Ino); err != nil || p != "c" {
		t.Errorf("path after rename = %q, %v", p, err)
	}
	d, err := f.Mkdir(RootIno, nfd, NewAttr{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Rmdir(RootIno, nfc); err != nil {
		t.Fatalf("rmdir of the other form: %v", err)
	}
	if _, err := f.GetAttr(d.Ino); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("removed directory still exists: %v", err)
	}
	if names := listNames(t, f, RootIno); len(names) != 1 || names[0] != "c" {
		t.Errorf("readdir = %q, want [c]", names)
	}
}

// A store of format 1 put names at the hash of their bytes as sent; with
// LegacyNameSlots its views still find them in either form.
func TestLegacyNameSlots(t *testing.T) {
	ctx := context.Background()
	f, st, _ := newTestFS(t, Options{})
	a, err := f.Create(RootIno, nfd, CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Move the entry to where format 1 put it.
	top := f.Top()
	err = st.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(entryKey(top, RootIno, nameSlot(nfd)))
		if err != nil {
			return err
		}
		if err := tx.Delete(entryKey(top, RootIno, nameSlot(nfd))); err != nil {
			return err
		}
		return tx.Set(entryKey(top, RootIno, hashSlot(nfd)), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Lookup(RootIno, nfc); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("without LegacyNameSlots: %v, want ENOENT (the test did not move the entry)", err)
	}
	g, err := openStore(t, st, Options{LegacyNameSlots: true}).OpenView(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{nfc, nfd} {
		if got, err := g.Lookup(RootIno, name); err != nil || got.Ino != a.Ino {
			t.Errorf("legacy lookup of %q = %v, %v", name, got.Ino, err)
		}
	}
	_, err = g.Create(RootIno, nfc, CreateGuarded, NewAttr{Mode: 0o644}, 0)
	wantErrno(t, "guarded create over a legacy entry", err, syscall.EEXIST)
	if err := g.Unlink(RootIno, nfc); err != nil {
		t.Fatal(err)
	}
	if names := listNames(t, g, RootIno); len(names) != 0 {
		t.Errorf("readdir after unlink = %q", names)
	}
}

func TestOpenFormat(t *testing.T) {
	ctx := context.Background()
	open := func() kv.Store { return kvtest.NewStore(t) }
	st := open()
	if legacy, err := openFormat(ctx, st); err != nil || legacy {
		t.Fatalf("new store: legacy=%v err=%v", legacy, err)
	}
	if _, err := newStore(st, Options{}).NewTree(ctx, 0o755, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	if legacy, err := openFormat(ctx, st); err != nil || legacy {
		t.Fatalf("reopened new store: legacy=%v err=%v", legacy, err)
	}

	old := open() // layers but no format key: written before format 2
	if _, err := newStore(old, Options{}).NewTree(ctx, 0o755, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	if legacy, err := openFormat(ctx, old); err != nil || !legacy {
		t.Fatalf("format 1 store: legacy=%v err=%v", legacy, err)
	}

	newer := open()
	if err := newer.Update(ctx, func(tx kv.Txn) error { return tx.Set(formatKey, u64(nil, storeFormat+1)) }); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, newer, Options{})
	var fe *FormatError
	if !errors.Is(err, ErrFormat) || !errors.As(err, &fe) || fe.Store != storeFormat+1 || fe.Build != storeFormat {
		t.Fatalf("newer format: %v, want a FormatError naming formats %d and %d", err, storeFormat+1, storeFormat)
	}

	// Every format this build knows opens as itself: 2 and 3 as current
	// stores (2 becomes 3 with its first extent, extent_test.go).
	for _, f := range []uint64{2, 3} {
		st := open()
		if _, err := newStore(st, Options{}).NewTree(ctx, 0o755, 0, 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := st.Update(ctx, func(tx kv.Txn) error { return tx.Set(formatKey, u64(nil, f)) }); err != nil {
			t.Fatal(err)
		}
		if legacy, err := openFormat(ctx, st); err != nil || legacy {
			t.Fatalf("format %d store: legacy=%v err=%v", f, legacy, err)
		}
	}
}

// TestFormatMigrations: every format before the current one says how a
// store of it is migrated, once.
func TestFormatMigrations(t *testing.T) {
	seen := map[uint64]bool{}
	for _, m := range migrations {
		if m.from < 1 || m.from >= storeFormat || seen[m.from] || m.how == "" {
			t.Errorf("migration %+v: want one, described, per format 1 to %d", m, storeFormat-1)
		}
		seen[m.from] = true
	}
	for f := uint64(1); f < storeFormat; f++ {
		if !seen[f] {
			t.Errorf("format %d has no migration to %d", f, f+1)
		}
	}
}

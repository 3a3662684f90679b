package cowfs

import "testing"

// TestKillSetID: a write or truncate with KillSetID clears setuid, and
// setgid only with group execute, in the same call; without it the bits
// stay.
func TestKillSetID(t *testing.T) {
	f, _, _ := newTestFS(t, Options{BlockSize: 4096})
	cases := []struct {
		mode, want uint32
	}{
		{0o6755, 0o0755}, // group-executable: both go
		{0o6745, 0o2745}, // no group execute: setgid stays (locking)
		{0o4700, 0o0700},
		{0o2710, 0o0710},
		{0o1755, 0o1755}, // sticky is not affected
	}
	ops := map[string]func(ino InodeID, kill bool) (Attr, error){
		"write": func(ino InodeID, kill bool) (Attr, error) {
			return f.WriteAtOpts(ino, []byte("data"), 0, WriteOptions{KillSetID: kill})
		},
		"truncate": func(ino InodeID, kill bool) (Attr, error) {
			size := uint64(1)
			return f.SetAttr(ino, SetAttr{Size: &size, KillSetID: kill})
		},
	}
	for name, op := range ops {
		for _, c := range cases {
			for _, kill := range []bool{false, true} {
				a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644}, 0)
				if err != nil {
					t.Fatal(err)
				}
				mode := c.mode
				if _, err := f.SetAttr(a.Ino, SetAttr{Mode: &mode}); err != nil {
					t.Fatal(err)
				}
				got, err := op(a.Ino, kill)
				if err != nil {
					t.Fatal(err)
				}
				want := c.mode
				if kill {
					want = c.want
				}
				if got.Mode != want {
					t.Errorf("%s (kill %v) of a %o file: mode %o, want %o", name, kill, c.mode, got.Mode, want)
				}
				if st, err := f.GetAttr(a.Ino); err != nil || st.Mode != want {
					t.Errorf("%s (kill %v) of a %o file: stored mode %o (%v), want %o", name, kill, c.mode, st.Mode, err, want)
				}
				if err := f.Unlink(RootIno, "f"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// An explicit mode in the same SETATTR wins.
	a, err := f.Create(RootIno, "g", CreateGuarded, NewAttr{Mode: 0o6755}, 0)
	if err != nil {
		t.Fatal(err)
	}
	size, mode := uint64(0), uint32(0o4755)
	if got, err := f.SetAttr(a.Ino, SetAttr{Size: &size, Mode: &mode, KillSetID: true}); err != nil || got.Mode != 0o4755 {
		t.Fatalf("truncate with an explicit mode: %o (%v), want 4755", got.Mode, err)
	}
	// An empty write changes nothing (as on Linux).
	if got, err := f.WriteAtOpts(a.Ino, nil, 0, WriteOptions{KillSetID: true}); err != nil || got.Mode != 0o4755 {
		t.Fatalf("empty write: %o (%v), want 4755", got.Mode, err)
	}
}

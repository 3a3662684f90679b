package cowfs

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, c := range []struct {
		name string
		want syscall.Errno
	}{
		{"", syscall.ENOENT},
		{".", syscall.EINVAL},
		{"..", syscall.EINVAL},
		{"a/b", syscall.EINVAL},
		{"a\x00b", syscall.EINVAL},
		{strings.Repeat("x", MaxNameLen), 0},
		{strings.Repeat("x", MaxNameLen+1), syscall.ENAMETOOLONG},
		{"...", 0},
		{".nfs.0001.0002", 0},
	} {
		if got := CheckName(c.name); got != c.want {
			t.Errorf("CheckName(%q) = %v, want %v", c.name, got, c.want)
		}
	}
	// The view answers the same errno as the check, for every operation
	// that takes a name.
	f, _, _ := newTestFS(t, Options{})
	for _, name := range []string{"", "a/b", strings.Repeat("y", MaxNameLen+1)} {
		want := CheckName(name)
		if _, err := f.Lookup(RootIno, name); !errors.Is(err, want) {
			t.Errorf("Lookup(%q): %v, want %v", name, err, want)
		}
		if _, err := f.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0); !errors.Is(err, want) {
			t.Errorf("Create(%q): %v, want %v", name, err, want)
		}
		if _, err := f.Mkdir(RootIno, name, NewAttr{Mode: 0o755}); !errors.Is(err, want) {
			t.Errorf("Mkdir(%q): %v, want %v", name, err, want)
		}
	}
}

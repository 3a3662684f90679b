package cowfs

import (
	"errors"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestSetAttrChecked: the check sees the attributes the change applies
// to; a refusal changes nothing; the attributes before and after are
// returned.
func TestSetAttrChecked(t *testing.T) {
	_, f := newTestTree(t, kvtest.NewStore(t), Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o644, UID: 1000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	pre, post, err := f.SetAttrChecked(a.Ino, false, func(cur Attr) (SetAttr, error) {
		if cur.UID != 1000 || cur.Mode != 0o644 {
			t.Errorf("check saw uid %d mode %o, want 1000 644", cur.UID, cur.Mode)
		}
		return SetAttr{Mode: &mode}, nil
	})
	if err != nil || pre.Mode != 0o644 || post.Mode != 0o600 {
		t.Fatalf("chmod: pre mode %o, post %o, %v; want 644, 600, nil", pre.Mode, post.Mode, err)
	}
	other := uint32(0o777)
	_, _, err = f.SetAttrChecked(a.Ino, false, func(Attr) (SetAttr, error) { return SetAttr{Mode: &other}, syscall.EPERM })
	if !errors.Is(err, syscall.EPERM) {
		t.Fatalf("refused change: %v, want EPERM", err)
	}
	if got, err := f.GetAttr(a.Ino); err != nil || got.Mode != 0o600 || got.Ctime != post.Ctime {
		t.Fatalf("after a refused change: mode %o ctime %v (%v); want 600, %v", got.Mode, got.Ctime, err, post.Ctime)
	}
}

// TestSetAttrCheckedSeesConcurrentChange: a chown that commits, through
// another view of the same tree, while the check runs makes the change's
// transaction start over, and the check, run again on the new owner,
// refuses: what the first check allowed on the old owner is not applied.
// A check against attributes read before the transaction, as SETATTR
// once made, would let the owner's chmod land on the file chowned away.
func TestSetAttrCheckedSeesConcurrentChange(t *testing.T) {
	s, f := newTestTree(t, kvtest.NewStore(t), Options{})
	a, err := f.Create(RootIno, "f", CreateUnchecked, NewAttr{Mode: 0o755, UID: 1000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	root := s.View(f.Stack()) // another client's view
	zero := uint32(0)
	setuid := uint32(0o4755)
	calls := 0
	_, _, err = f.SetAttrChecked(a.Ino, false, func(cur Attr) (SetAttr, error) {
		calls++
		if calls == 1 {
			done := make(chan error)
			go func() {
				_, err := root.SetAttr(a.Ino, SetAttr{UID: &zero})
				done <- err
			}()
			if err := <-done; err != nil {
				t.Errorf("concurrent chown: %v", err)
			}
		}
		if cur.UID != 1000 {
			return SetAttr{}, syscall.EPERM // the caller owns the file no more
		}
		return SetAttr{Mode: &setuid}, nil
	})
	if !errors.Is(err, syscall.EPERM) || calls < 2 {
		t.Fatalf("chmod raced by a chown: %v after %d checks; want EPERM after 2 or more", err, calls)
	}
	got, err := f.GetAttr(a.Ino)
	if err != nil || got.UID != 0 || got.Mode != 0o755 {
		t.Fatalf("after the race: uid %d mode %o (%v); want 0 755", got.UID, got.Mode, err)
	}
}

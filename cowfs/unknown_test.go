package cowfs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// lostCommit wraps a store. While armed, the next write transaction that
// writes something answers kv.ErrUnknownOutcome, as etcd does when the
// leader is lost after the commit was sent: applied (apply set) or not.
// While failViews is set, read transactions fail (the store does not
// answer yet). updates counts the write transactions that ran.
type lostCommit struct {
	kv.Store
	armed     atomic.Bool
	apply     bool
	failViews atomic.Bool
	updates   atomic.Int32
	// unavailable is how many read transactions from now on fail with
	// kv.ErrUnavailable (an etcd cluster electing a leader).
	unavailable atomic.Int32
}

// writes wraps a transaction to record whether it wrote.
type writes struct {
	kv.Txn
	n *int
}

func (w writes) Set(k, v []byte) error { *w.n++; return w.Txn.Set(k, v) }
func (w writes) Delete(k []byte) error { *w.n++; return w.Txn.Delete(k) }

var errLostCommit = fmt.Errorf("%w: the connection to the leader was lost; it may or may not have been applied", kv.ErrUnknownOutcome)

func (l *lostCommit) Update(ctx context.Context, fn func(kv.Txn) error) error {
	l.updates.Add(1)
	if !l.armed.Load() {
		return l.Store.Update(ctx, fn)
	}
	var n int
	wrote := func(tx kv.Txn) error { n = 0; return fn(writes{tx, &n}) }
	if !l.apply {
		// Run fn on a transaction that is then dropped: nothing stored.
		err := l.Store.Update(ctx, func(tx kv.Txn) error {
			if err := wrote(tx); err != nil {
				return err
			}
			return errDropped
		})
		if errors.Is(err, errDropped) && n > 0 {
			l.armed.Store(false)
			return errLostCommit
		}
		if errors.Is(err, errDropped) {
			return l.Store.Update(ctx, fn)
		}
		return err
	}
	err := l.Store.Update(ctx, wrote)
	if err == nil && n > 0 {
		l.armed.Store(false)
		return errLostCommit
	}
	return err
}

var errDropped = errors.New("dropped")

func (l *lostCommit) View(ctx context.Context, fn func(kv.Txn) error) error {
	if l.failViews.Load() {
		return errors.New("lost commit: no leader")
	}
	if l.unavailable.Add(-1) >= 0 {
		return fmt.Errorf("%w: no leader yet", kv.ErrUnavailable)
	}
	return l.Store.View(ctx, fn)
}

// TestNamespaceChangeUnknownOutcome: a CREATE, MKDIR, SYMLINK, LINK,
// REMOVE, RMDIR or RENAME whose commit's answer was lost succeeds, once,
// whether the commit was applied (the directory read again shows it) or
// not (it runs again); the tree is then what the change makes it. Only
// when the store cannot be read either does the change fail (EIO).
func TestNamespaceChangeUnknownOutcome(t *testing.T) {
	type op struct {
		name string
		do   func(f *View) error
		// check returns an error if the tree is not as the change left it.
		check func(f *View) error
	}
	exists := func(f *View, name string) error {
		_, err := f.Lookup(RootIno, name)
		return err
	}
	gone := func(f *View, name string) error {
		if _, err := f.Lookup(RootIno, name); !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("%s: lookup says %v, want ENOENT", name, err)
		}
		return nil
	}
	ops := []op{
		{"create", func(f *View) error {
			_, err := f.Create(RootIno, "new", CreateGuarded, NewAttr{Mode: 0o644}, 0)
			return err
		}, func(f *View) error { return exists(f, "new") }},
		{"mkdir", func(f *View) error {
			_, err := f.Mkdir(RootIno, "newdir", NewAttr{Mode: 0o755})
			return err
		}, func(f *View) error { return exists(f, "newdir") }},
		{"symlink", func(f *View) error {
			_, err := f.Symlink(RootIno, "ln", "file", NewAttr{})
			return err
		}, func(f *View) error { return exists(f, "ln") }},
		{"link", func(f *View) error {
			a, err := f.Lookup(RootIno, "file")
			if err != nil {
				return err
			}
			_, err = f.Link(a.Ino, RootIno, "hard")
			return err
		}, func(f *View) error {
			a, err := f.Lookup(RootIno, "file")
			if err != nil {
				return err
			}
			if a.Nlink != 2 {
				return fmt.Errorf("file has %d links, want 2", a.Nlink)
			}
			return exists(f, "hard")
		}},
		{"remove", func(f *View) error { return f.Unlink(RootIno, "file") },
			func(f *View) error { return gone(f, "file") }},
		{"rmdir", func(f *View) error { return f.Rmdir(RootIno, "dir") },
			func(f *View) error { return gone(f, "dir") }},
		{"rename", func(f *View) error { return f.Rename(RootIno, "file", RootIno, "moved") },
			func(f *View) error {
				if err := gone(f, "file"); err != nil {
					return err
				}
				return exists(f, "moved")
			}},
	}
	for _, o := range ops {
		for _, apply := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/applied=%v", o.name, apply), func(t *testing.T) {
				st := &lostCommit{Store: kvtest.NewStore(t), apply: apply}
				_, f := newTestTree(t, st, Options{})
				if _, err := f.Create(RootIno, "file", CreateGuarded, NewAttr{Mode: 0o644}, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := f.Mkdir(RootIno, "dir", NewAttr{Mode: 0o755}); err != nil {
					t.Fatal(err)
				}
				st.updates.Store(0)
				st.armed.Store(true)
				if err := o.do(f); err != nil {
					t.Fatalf("%s whose answer was lost: %v", o.name, err)
				}
				if st.armed.Load() {
					t.Fatalf("%s wrote nothing: no answer was lost", o.name)
				}
				if err := o.check(f); err != nil {
					t.Fatal(err)
				}
				// Applied: the change is not run again (it would fail:
				// the entry is there, or gone). Not applied: once more.
				want := int32(1)
				if !apply {
					want = 2
				}
				if n := st.updates.Load(); n != want {
					t.Fatalf("%s ran %d write transactions, want %d", o.name, n, want)
				}
			})
		}
	}
	// The store is unavailable for a moment after the lost answer (its
	// leader is being elected): the REMOVE reads again and answers OK,
	// not EAGAIN, which would make the client's retry find the entry
	// gone (ENOENT).
	t.Run("store back soon", func(t *testing.T) {
		st := &lostCommit{Store: kvtest.NewStore(t), apply: true}
		_, f := newTestTree(t, st, Options{})
		if _, err := f.Create(RootIno, "file", CreateGuarded, NewAttr{Mode: 0o644}, 0); err != nil {
			t.Fatal(err)
		}
		st.armed.Store(true)
		st.unavailable.Store(3)
		if err := f.Unlink(RootIno, "file"); err != nil {
			t.Fatalf("remove whose answer was lost, store unavailable for three reads: %v, want success", err)
		}
		if err := gone(f, "file"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("store down", func(t *testing.T) {
		st := &lostCommit{Store: kvtest.NewStore(t), apply: true}
		_, f := newTestTree(t, st, Options{})
		if _, err := f.Create(RootIno, "file", CreateGuarded, NewAttr{Mode: 0o644}, 0); err != nil {
			t.Fatal(err)
		}
		st.armed.Store(true)
		st.failViews.Store(true)
		err := f.Unlink(RootIno, "file")
		if !errors.Is(err, syscall.EAGAIN) { // NFS3ERR_JUKEBOX: try again later
			t.Fatalf("remove whose answer was lost, store unreadable: %v, want EAGAIN", err)
		}
		st.failViews.Store(false)
		if err := gone(f, "file"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestUnavailableIsRetried: an error saying the store, the bucket or a
// lease is out of reach maps to EAGAIN (NFS3ERR_JUKEBOX) even when it
// wraps the network's errno, and a fenced commit maps to EROFS.
func TestUnavailableIsRetried(t *testing.T) {
	refused := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{fmt.Errorf("%w: %w", kv.ErrUnavailable, refused), syscall.EAGAIN},
		{fmt.Errorf("%w: %w", blobs.ErrUnavailable, refused), syscall.EAGAIN},
		{fmt.Errorf("%w: %w", kv.ErrUnknownOutcome, refused), syscall.EAGAIN},
		{fmt.Errorf("%w: twice in a row", kv.ErrLeaseLost), syscall.EAGAIN},
		{fmt.Errorf("%w: owned by another lease", kv.ErrFenced), syscall.EROFS},
	}
	for _, c := range cases {
		if got := toErrno(c.err); got != c.want {
			t.Errorf("toErrno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

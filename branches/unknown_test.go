package branches_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// lostAnswer wraps a store. While applyLost is set, the next write
// transaction is applied but answers kv.ErrUnknownOutcome, as a store
// reached over the network does when its connection or leader is lost
// after the commit. While failViews is above zero, read transactions fail
// (the store does not answer yet), one fewer each time.
type lostAnswer struct {
	kv.Store
	applyLost atomic.Bool
	failViews atomic.Int32
}

func (l *lostAnswer) Update(ctx context.Context, fn func(kv.Txn) error) error {
	err := l.Store.Update(ctx, fn)
	if err == nil && l.applyLost.CompareAndSwap(true, false) {
		return fmt.Errorf("%w: the connection to the leader was lost; it may or may not have been applied", kv.ErrUnknownOutcome)
	}
	return err
}

func (l *lostAnswer) View(ctx context.Context, fn func(kv.Txn) error) error {
	if l.failViews.Add(-1) >= 0 {
		return errors.New("lost answer: no leader")
	}
	l.failViews.Store(0)
	return l.Store.View(ctx, fn)
}

// A commit applied though its answer was lost: the next fork from the
// parent must fork the committed state and stay live, and the siblings
// the commit invalidated say so, whether the records could be read again
// at once (the Manager reads them before Commit returns) or only later
// (the next operation reads them first).
func TestCommitUnknownOutcomeThenFork(t *testing.T) {
	for _, storeDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("storeDown=%v", storeDown), func(t *testing.T) {
			ctx := context.Background()
			inner, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer inner.Close()
			st := &lostAnswer{Store: inner}
			m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			write(t, m, "main", "old.txt", "old")
			must(m.Fork(ctx, "main", "kid"))(t)
			must(m.Fork(ctx, "main", "sib"))(t)
			write(t, m, "kid", "kid.txt", "kid data")

			st.applyLost.Store(true)
			if storeDown {
				st.failViews.Store(1)
			}
			if _, err := m.Commit(ctx, "kid"); !errors.Is(err, kv.ErrUnknownOutcome) {
				t.Fatalf("commit whose answer was lost: %v, want kv.ErrUnknownOutcome", err)
			} else {
				t.Log(err)
			}

			info, err := m.Fork(ctx, "main", "after")
			if err != nil {
				t.Fatalf("fork after the commit with the lost answer: %v", err)
			}
			if info.State != branches.StateLive {
				t.Fatalf("fork after the lost answer: state %s, want live", info.State)
			}
			if got := read(t, m, "after", "kid.txt"); got != "kid data" {
				t.Errorf("the fork after the applied commit reads kid.txt as %q, want the committed %q", got, "kid data")
			}
			if got := read(t, m, "main", "kid.txt"); got != "kid data" {
				t.Errorf("main reads kid.txt as %q after the applied commit", got)
			}
			// What a reload of the store says must not change it.
			m2, err := branches.Open(ctx, branches.Options{Store: inner, ReclaimDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			for _, mm := range []*branches.Manager{m, m2} {
				got, err := mm.Get(ctx, "after")
				if err != nil || got.State != branches.StateLive {
					t.Errorf("the fork after the lost answer: %+v, %v; want live", got, err)
				}
				if got, err := mm.Get(ctx, "sib"); err == nil && got.State == branches.StateLive {
					t.Errorf("sib, a sibling of the applied commit, is still live: %+v", got)
				}
				if got, err := mm.Get(ctx, "kid"); err == nil && got.State == branches.StateLive {
					t.Errorf("kid, committed, is still live: %+v", got)
				}
			}
			if got := read(t, m2, "after", "kid.txt"); got != "kid data" {
				t.Errorf("reopened: the fork reads kid.txt as %q", got)
			}
		})
	}
}

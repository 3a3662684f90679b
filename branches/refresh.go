package branches

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/branchnfs/branchnfs/kv"
)

// Several servers over one store (etcd) each hold a Manager. A Manager
// learns of the others' changes to branch records through a watch on the
// records' prefix ('B'): a branch forked elsewhere appears, a new top of
// a branch (another server's commit into it, its fork, a fold) re-opens
// the view on the new stack, and a branch invalidated, committed or
// aborted elsewhere answers ErrStale here. Each event re-reads the
// record from the store under opMu rather than trusting the event's
// value, so an echo of this Manager's own change, or an event older than
// what the Manager holds, changes nothing. After the watch fails (the
// member lost its leader, the history was compacted, the cluster is out
// of reach) the Manager reloads every record and watches from there.

// Coord is what a Manager over a store shared by several servers uses to
// learn of the others' changes: etcdkv.Coord implements it.
type Coord interface {
	// Revision is the store's current revision: a watch from Revision+1
	// misses nothing committed after the call.
	Revision(ctx context.Context) (int64, error)
	// Watch calls fn with every change of a key under prefix from
	// revision from on, in revision order, until ctx ends or it fails.
	Watch(ctx context.Context, prefix []byte, from int64, fn func(kv.Event) error) error
}

// rewatchDelay is how long the refresher waits after a failed watch or
// reload before it tries again.
const rewatchDelay = 200 * time.Millisecond

// watchLoop keeps the Manager's branches in step with the store until
// ctx ends.
func (m *Manager) watchLoop(ctx context.Context, from int64) {
	defer m.wg.Done()
	for ctx.Err() == nil {
		if from == 0 {
			rev, err := m.opts.Coord.Revision(ctx)
			if err == nil {
				err = m.reloadAll(ctx)
			}
			if err != nil {
				if ctx.Err() == nil {
					m.opts.Logger.Warn("branches: cannot read the branch records to follow other servers' changes; retrying", "err", err)
					sleepCtx(ctx, rewatchDelay)
				}
				continue
			}
			from = rev + 1
		}
		err := m.opts.Coord.Watch(ctx, []byte{'B'}, from, func(e kv.Event) error {
			from = e.Revision + 1
			if len(e.Key) != 9 {
				return nil
			}
			id := BranchID(binary.BigEndian.Uint64(e.Key[1:]))
			if err := m.refresh(ctx, []BranchID{id}); err != nil {
				return fmt.Errorf("refreshing branch id %d: %w", id, err)
			}
			m.refreshed.Add(1)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		// Whatever failed, a full reload catches up with what the watch
		// may have missed.
		m.opts.Logger.Warn("branches: the watch on branch records ended; reloading them and watching again", "err", err)
		from = 0
		sleepCtx(ctx, rewatchDelay)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// reloadAll brings every branch the Manager holds, and every live branch
// of the store, in step with the stored records.
func (m *Manager) reloadAll(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	recs, err := m.readAllRecords(ctx)
	if err != nil {
		return err
	}
	m.mu.RLock()
	for id := range m.byID {
		if _, ok := recs[id]; !ok {
			recs[id] = nil
		}
	}
	m.mu.RUnlock()
	return m.applyRecords(ctx, recs)
}

// refresh brings the branches ids in step with their stored records.
func (m *Manager) refresh(ctx context.Context, ids []BranchID) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	recs := make(map[BranchID]*record, len(ids))
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		clear(recs)
		for _, id := range ids {
			v, err := tx.Get(branchKey(id))
			if errors.Is(err, kv.ErrNotFound) {
				recs[id] = nil
				continue
			}
			if err != nil {
				return err
			}
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("branches: corrupt record of branch id %d: %w", id, err)
			}
			recs[id] = &r
		}
		return nil
	})
	if err != nil {
		return mapErr(err)
	}
	return m.applyRecords(ctx, recs)
}

func (m *Manager) readAllRecords(ctx context.Context) (map[BranchID]*record, error) {
	recs := map[BranchID]*record{}
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		clear(recs)
		return tx.Iterate([]byte{'B'}, nil, false, func(k, v []byte) (bool, error) {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return false, fmt.Errorf("branches: corrupt record %x: %w", k, err)
			}
			recs[r.ID] = &r
			return true, nil
		})
	})
	return recs, mapErr(err)
}

// applyRecords makes the Manager hold what recs (stored records by id;
// nil for a record gone from the store) say, and marks the branches a
// commit invalidated. The caller holds opMu.
func (m *Manager) applyRecords(ctx context.Context, recs map[BranchID]*record) error {
	ids := make([]BranchID, 0, len(recs))
	for id := range recs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	// Branches that ended first: a name they free may be taken by a
	// branch forked since.
	for _, id := range ids {
		r := recs[id]
		m.mu.RLock()
		b := m.byID[id]
		m.mu.RUnlock()
		if b == nil {
			continue
		}
		switch {
		case r == nil || r.State == StateCommitted || r.State == StateAborted:
			what := "removed from the store"
			if r != nil {
				what = string(r.State)
			}
			b.fs.Invalidate(fmt.Errorf("%w: branch %q was %s by another server", ErrStale, b.rec.Name, what))
			if b.owned {
				m.release(ctx, id)
			}
			m.mu.Lock()
			if r != nil {
				b.rec = *r
			}
			if m.byName[b.rec.Name] == b {
				delete(m.byName, b.rec.Name)
			}
			m.releaseLocked(b)
			m.mu.Unlock()
			m.kickReclaim()
		case reflect.DeepEqual(*r, b.rec):
		default:
			if r.Top != b.rec.Top && r.State == StateLive {
				stack, err := m.cow.Stack(ctx, r.Top)
				if err != nil {
					return fmt.Errorf("branches: the new stack of %s: %w", r.Name, mapErr(err))
				}
				// main takes no writes on a shared store: when its new
				// top is empty (another server's fork froze the old one),
				// say so, and the next fork or commit here does not
				// freeze it again (fewer record changes, fewer conflicts
				// between servers). Other branches' tops take their
				// owner's writes at any time.
				fresh := false
				if r.Parent == 0 && m.owning() {
					if fresh, err = m.cow.LayerEmpty(ctx, r.Top); err != nil {
						return fmt.Errorf("branches: the new top of %s: %w", r.Name, mapErr(err))
					}
				}
				b.fs.Lock()
				if fresh {
					b.fs.SetFreshStackLocked(stack)
				} else {
					b.fs.SetStackLocked(stack)
				}
				b.fs.Unlock()
			}
			if r.State == StateInvalidated && b.rec.State == StateLive {
				b.fs.Invalidate(&InvalidatedError{Branch: r.Name, By: r.InvalidatedBy})
			}
			m.mu.Lock()
			b.rec = *r
			m.mu.Unlock()
		}
	}
	for _, id := range ids {
		r := recs[id]
		if r == nil || (r.State != StateLive && r.State != StateInvalidated) {
			continue
		}
		m.mu.RLock()
		_, held := m.byID[id]
		other := m.byName[r.Name]
		m.mu.RUnlock()
		if held {
			continue
		}
		if other != nil {
			// Its end is in a record not read yet: the event is on
			// its way, and a reload would have read both.
			m.opts.Logger.Warn("branches: a branch forked on another server has the name of one this server holds; waiting for the other's end", "branch", r.Name)
			continue
		}
		fs, err := m.cow.OpenView(ctx, r.Top)
		if err != nil {
			return fmt.Errorf("branches: open %s, forked on another server: %w", r.Name, mapErr(err))
		}
		if r.State == StateInvalidated {
			fs.Invalidate(&InvalidatedError{Branch: r.Name, By: r.InvalidatedBy})
		}
		b := &branch{rec: *r, fs: fs}
		m.mu.Lock()
		m.setOwnedLocked(b, false)
		m.byID[id], m.byName[r.Name] = b, b
		m.mu.Unlock()
	}
	// A commit elsewhere raises the parent's generation only: mark the
	// children it invalidated, and theirs.
	m.mu.Lock()
	held := make(map[BranchID]*record, len(m.byID))
	for id, b := range m.byID {
		r := b.rec
		held[id] = &r
	}
	stale(held)
	var hit []*branch
	for id, r := range held {
		b := m.byID[id]
		if r.State == StateInvalidated && b.rec.State == StateLive {
			b.rec = *r
			hit = append(hit, b)
		}
	}
	m.mu.Unlock()
	for _, b := range hit {
		b.fs.Invalidate(&InvalidatedError{Branch: b.rec.Name, By: b.rec.InvalidatedBy})
	}
	return nil
}

// Refreshed counts the watch events a Manager with Options.Coord applied
// (tests wait on it).
func (m *Manager) Refreshed() int64 { return m.refreshed.Load() }

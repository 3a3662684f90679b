package branches

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
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
// ctx ends. It only reads the watch: the changes are applied under opMu
// by applyLoop, so a long operation here (a commit's merge holds opMu
// throughout) delays neither the watch nor what needs no opMu: views of
// branches the events show ended are made stale at once (endEarly).
func (m *Manager) watchLoop(ctx context.Context, from int64) {
	defer m.wg.Done()
	q := &followQueue{kick: make(chan struct{}, 1)}
	m.wg.Add(1)
	go m.applyLoop(ctx, q)
	for ctx.Err() == nil {
		if from == 0 {
			rev, err := m.opts.Coord.Revision(ctx)
			if err != nil {
				if ctx.Err() == nil {
					m.opts.Logger.Warn("branches: cannot read the store's revision to follow other servers' changes; retrying", "err", err)
					sleepCtx(ctx, rewatchDelay)
				}
				continue
			}
			// Whatever the failed watch missed, a full reload (after
			// rev) catches up with.
			q.push(0, true)
			from = rev + 1
		}
		err := m.opts.Coord.Watch(ctx, []byte{'B'}, from, func(e kv.Event) error {
			from = e.Revision + 1
			if len(e.Key) != 9 {
				return nil
			}
			id := BranchID(binary.BigEndian.Uint64(e.Key[1:]))
			m.endEarly(id, e)
			q.push(id, false)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		m.opts.Logger.Warn("branches: the watch on branch records ended; reloading them and watching again", "err", err)
		from = 0
		sleepCtx(ctx, rewatchDelay)
	}
}

// followQueue holds what the watch saw and applyLoop has not applied yet.
type followQueue struct {
	kick chan struct{} // has a value when the queue may hold work

	mu     sync.Mutex // protects the following
	ids    map[BranchID]bool
	events int64 // events behind ids and reload
	reload bool  // every record is to be read again
}

// push queues branch id's record (or, with reload, every record) to be
// read again.
func (q *followQueue) push(id BranchID, reload bool) {
	q.mu.Lock()
	if reload {
		q.reload = true
	} else {
		if q.ids == nil {
			q.ids = map[BranchID]bool{}
		}
		q.ids[id] = true
		q.events++
	}
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (q *followQueue) take() (ids []BranchID, events int64, reload bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for id := range q.ids {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	events, reload = q.events, q.reload
	q.ids, q.events, q.reload = nil, 0, false
	return ids, events, reload
}

// applyLoop applies what the watch queued, under opMu, until ctx ends. A
// refresh that fails is replaced by a full reload, retried until it
// succeeds.
func (m *Manager) applyLoop(ctx context.Context, q *followQueue) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
		}
		for ctx.Err() == nil {
			ids, events, reload := q.take()
			if len(ids) == 0 && !reload {
				break
			}
			var err error
			if reload {
				err = m.reloadAll(ctx)
			} else {
				err = m.refresh(ctx, ids)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.opts.Logger.Warn("branches: cannot apply other servers' changes to branch records; reading them all again", "err", err)
				q.mu.Lock()
				q.reload, q.events = true, q.events+events
				q.mu.Unlock()
				sleepCtx(ctx, rewatchDelay)
				continue
			}
			m.refreshed.Add(events)
		}
	}
}

// endEarly makes stale, without waiting for opMu, the views of branches
// that event e shows have ended: a branch whose record is gone or says
// committed, aborted or invalidated, and the live children (and theirs)
// of a branch whose generation a commit raised past theirs. Each of
// these is final (a branch never comes back to life, a generation never
// goes down), so an event older than what the Manager holds is still
// right. The records in memory are left to applyLoop; a view some other
// path has already made stale keeps its own reason. The caller is
// watchLoop.
func (m *Manager) endEarly(id BranchID, e kv.Event) {
	var r record
	if !e.Deleted {
		if err := json.Unmarshal(e.Value, &r); err != nil {
			return // applyLoop reads it again and says what is wrong
		}
	}
	type end struct {
		fs    interface{ InvalidateIfLive(error) bool }
		cause error
	}
	var ends []end
	m.mu.RLock()
	if b := m.byID[id]; b != nil && b.fs != nil {
		switch {
		case e.Deleted:
			ends = append(ends, end{b.fs, fmt.Errorf("%w: branch %q was removed from the store", ErrStale, b.rec.Name)})
		case r.State == StateCommitted || r.State == StateAborted:
			ends = append(ends, end{b.fs, fmt.Errorf("%w: branch %q was %s", ErrStale, r.Name, r.State)})
		case r.State == StateInvalidated:
			ends = append(ends, end{b.fs, &InvalidatedError{Branch: r.Name, By: r.InvalidatedBy}})
		}
	}
	if !e.Deleted {
		held := make(map[BranchID]*record, len(m.byID))
		for hid, b := range m.byID {
			hr := b.rec
			held[hid] = &hr
		}
		if p := held[id]; p != nil && r.Gen > p.Gen {
			p.Gen, p.LastCommit = r.Gen, r.LastCommit
			stale(held)
			for hid, hr := range held {
				b := m.byID[hid]
				if hr.State == StateInvalidated && b.rec.State == StateLive && b.fs != nil {
					ends = append(ends, end{b.fs, &InvalidatedError{Branch: hr.Name, By: hr.InvalidatedBy}})
				}
			}
		}
	}
	m.mu.RUnlock()
	if len(ends) == 0 {
		return
	}
	// A view's Lock may be held for a while (a commit of that branch
	// here): wait for it off the watch. The caller is in m.wg.
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for _, x := range ends {
			x.fs.InvalidateIfLive(x.cause)
		}
	}()
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

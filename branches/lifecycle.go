package branches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/branchnfs/branchnfs/branches/results"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Fork creates branch name over the current state of parent in one small
// transaction, whatever the size of the parent. Later writes to either side
// stay invisible to the other.
func (m *Manager) Fork(ctx context.Context, parent, name string) (Info, error) {
	if err := CheckName(name); err != nil {
		return Info{}, err
	}
	return retryChanged(ctx, m, parent, func() (Info, error) { return m.forkOnce(ctx, parent, name) })
}

func (m *Manager) forkOnce(ctx context.Context, parent, name string) (Info, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	p, err := m.live(parent)
	if err != nil {
		return Info{}, err
	}
	if err := m.nameFree(name); err != nil {
		return Info{}, err
	}
	pfs := p.fs
	pfs.Lock()
	defer pfs.Unlock()
	// Another server writes the parent's top: it cannot be frozen from
	// here, but the parent's last frozen layer is its state if that top
	// is empty, which the transaction checks.
	mayFreeze := m.owns(p)
	var z freeze
	if mayFreeze {
		z, err = m.freezeTop(ctx, pfs)
	} else if stack := pfs.StackLocked(); len(stack) > 1 {
		z = freeze{v: pfs, stack: stack, frozen: stack[1:]}
	} else {
		err = m.notOwner(ctx, p, "fork from")
	}
	if err != nil {
		return Info{}, err
	}
	ctop, err := m.cow.NewLayerID(ctx)
	if err != nil {
		return Info{}, err
	}
	id, err := m.cow.Next(ctx, "branch")
	if err != nil {
		return Info{}, err
	}
	if m.owning() {
		if _, _, err := m.claim(ctx, BranchID(id)); err != nil {
			return Info{}, fmt.Errorf("branches: fork %s from %s: %w", name, parent, err)
		}
	}
	prec := z.record(p.rec)
	crec := record{ID: BranchID(id), Name: name, Parent: p.rec.ID, State: StateLive, Top: ctop,
		Base: z.frozen[0], ParentTop: prec.Top, ForkTime: time.Now().UTC(), ForkGen: p.rec.Gen}
	if m.owning() {
		crec.Owner = m.opts.Server
	}
	var unfrozen bool // the parent's top holds writes of its owner
	uctx := ctx
	if mayFreeze && z.newTop != 0 {
		uctx = m.fenced(ctx, p) // it writes the parent's record
	}
	err = m.cow.Update(uctx, func(tx *cowfs.Txn) error {
		if !mayFreeze {
			if err := checkRecord(tx.KV(), p.rec); err != nil {
				return err
			}
			empty, err := tx.LayerEmpty(z.stack[0])
			if err != nil {
				return err
			}
			if unfrozen = !empty; unfrozen {
				return ErrNotOwner
			}
		}
		if err := z.put(tx, prec); err != nil {
			return err
		}
		if err := tx.PutLayer(ctop, z.frozen[0]); err != nil {
			return err
		}
		return putRecord(tx.KV(), crec)
	})
	if err != nil {
		if m.owning() {
			m.release(ctx, BranchID(id))
		}
		if unfrozen {
			return Info{}, fmt.Errorf("%w (its owner has written to it since its last fork, checkpoint or commit)", m.notOwner(ctx, p, "fork from"))
		}
		return Info{}, fmt.Errorf("branches: fork %s from %s: %w", name, parent, mapErr(err))
	}
	m.installTop(p, z, prec)
	c := &branch{rec: crec, fs: m.cow.FreshView(append([]cowfs.LayerID{ctop}, z.frozen...))}
	m.mu.Lock()
	m.setOwnedLocked(c, true)
	m.byID[c.rec.ID], m.byName[name] = c, c
	info := m.infoLocked(c)
	m.mu.Unlock()
	return info, nil
}

// freeze is how freezeTop froze a view's top.
type freeze struct {
	v      *cowfs.View
	stack  []cowfs.LayerID // v's stack when frozen, top first
	frozen []cowfs.LayerID // the frozen stack to fork, checkpoint or merge over
	newTop cowfs.LayerID   // v's new top over stack, or 0: v keeps its top
}

// freezeTop freezes the top of view v, which the caller holds locked (for
// a fork, a checkpoint or a merge). If nothing was written since the last
// freeze, the layer below the top is already frozen and is the one to
// use: frozen is stack[1:] and v keeps its empty top. Otherwise the top
// itself freezes (frozen is stack) and newTop is a fresh layer id to
// become v's top: the caller stores it with put in its transaction, then
// installs it with installTop.
func (m *Manager) freezeTop(ctx context.Context, v *cowfs.View) (freeze, error) {
	stack := v.StackLocked()
	if !v.TopDirty() && len(stack) > 1 {
		return freeze{v: v, stack: stack, frozen: stack[1:]}, nil
	}
	newTop, err := m.cow.NewLayerID(ctx)
	return freeze{v: v, stack: stack, frozen: stack, newTop: newTop}, err
}

// top is v's top once the freeze is installed.
func (z freeze) top() cowfs.LayerID {
	if z.newTop != 0 {
		return z.newTop
	}
	return z.stack[0]
}

// record returns the record of v's branch once the freeze is installed.
func (z freeze) record(r record) record {
	r.Top = z.top()
	return r
}

// put stores the new top over the frozen one, and r (from record), in tx;
// nothing when v keeps its top. It fails with a *changedError if the
// stored record is no longer the one r was made from.
func (z freeze) put(tx *cowfs.Txn, r record) error {
	if z.newTop == 0 {
		return nil
	}
	old := r
	old.Top = z.stack[0]
	if err := checkRecord(tx.KV(), old); err != nil {
		return err
	}
	if err := tx.PutLayer(z.newTop, z.stack[0]); err != nil {
		return err
	}
	return putRecord(tx.KV(), r)
}

// changedError: the stored record of a branch is not the one this
// Manager holds: another Manager over the same store changed it.
type changedError struct{ stored record }

func (e *changedError) Error() string {
	return fmt.Sprintf("branches: the record of branch %q changed in the store since this server read it (another server forked, checkpointed or committed into it); retry", e.stored.Name)
}

func (e *changedError) Is(target error) bool { return target == kv.ErrConflict }

// checkRecord reads the stored record of want.ID in tx, so that a
// concurrent change of it makes tx conflict, and fails with a
// *changedError unless its state, top and commit generation are want's.
func checkRecord(tx kv.Txn, want record) error {
	v, err := tx.Get(branchKey(want.ID))
	if err != nil {
		return err
	}
	var got record
	if err := json.Unmarshal(v, &got); err != nil {
		return fmt.Errorf("branches: corrupt record of %q: %w", want.Name, err)
	}
	if got.State != want.State || got.Top != want.Top || got.Gen != want.Gen || got.Merging != want.Merging {
		return &changedError{stored: got}
	}
	return nil
}

// checkStored is checkRecord for a record as the Manager holds it, whose
// state may be invalidated in memory only (by a commit that raised its
// parent's generation: see stale) while the store says live.
func checkStored(tx kv.Txn, held record) error {
	if held.State == StateInvalidated {
		err := checkRecord(tx, held)
		var ce *changedError
		if !errors.As(err, &ce) || ce.stored.State != StateLive || ce.stored.Top != held.Top || ce.stored.Gen != held.Gen {
			return err
		}
		return nil
	}
	return checkRecord(tx, held)
}

// installTop makes what put stored b's state in memory: the view's new
// top and the record r. The caller holds opMu and the view's Lock.
func (m *Manager) installTop(b *branch, z freeze, r record) {
	if z.newTop == 0 {
		return
	}
	z.v.SetFreshStackLocked(append([]cowfs.LayerID{z.newTop}, z.stack...))
	m.mu.Lock()
	b.rec = r
	m.mu.Unlock()
}

// splitAtBase splits a stack (top first) at a branch's fork base: the
// layers above the base (the branch's own changes) and the base's stack.
// fromBase is nil if base is not in stack.
func splitAtBase(stack []cowfs.LayerID, base cowfs.LayerID) (above, fromBase []cowfs.LayerID) {
	for i, l := range stack {
		if l == base {
			return stack[:i], stack[i:]
		}
	}
	return nil, nil
}

// ForkCheckpoint creates branch name from checkpoint label of parent.
func (m *Manager) ForkCheckpoint(ctx context.Context, parent, label, name string) (Info, error) {
	if err := CheckName(name); err != nil {
		return Info{}, err
	}
	if err := m.settled(ctx); err != nil {
		return Info{}, err
	}
	info, err := m.forkCheckpointOnce(ctx, parent, label, name)
	return info, m.settle(ctx, err)
}

func (m *Manager) forkCheckpointOnce(ctx context.Context, parent, label, name string) (Info, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	p, err := m.live(parent)
	if err != nil {
		return Info{}, err
	}
	if err := m.nameFree(name); err != nil {
		return Info{}, err
	}
	cp, err := m.checkpoint(ctx, p, label)
	if err != nil {
		return Info{}, err
	}
	ctop, err := m.cow.NewLayerID(ctx)
	if err != nil {
		return Info{}, err
	}
	id, err := m.cow.Next(ctx, "branch")
	if err != nil {
		return Info{}, err
	}
	crec := record{ID: BranchID(id), Name: name, Parent: p.rec.ID, State: StateLive, Top: ctop,
		Base: cp.Layer, ForkTime: time.Now().UTC(), ForkedFrom: label, ForkGen: p.rec.Gen}
	if m.owning() {
		crec.Owner = m.opts.Server
		if _, _, err := m.claim(ctx, BranchID(id)); err != nil {
			return Info{}, fmt.Errorf("branches: fork %s from %s: %w", name, parent, err)
		}
	}
	err = m.cow.Update(ctx, func(tx *cowfs.Txn) error {
		if err := tx.PutLayer(ctop, cp.Layer); err != nil {
			return err
		}
		return putRecord(tx.KV(), crec)
	})
	if err != nil {
		if m.owning() {
			m.release(ctx, BranchID(id))
		}
		return Info{}, mapErr(err)
	}
	fs, err := m.cow.OpenView(ctx, ctop)
	if err != nil {
		return Info{}, err
	}
	c := &branch{rec: crec, fs: fs}
	m.mu.Lock()
	m.setOwnedLocked(c, true)
	m.byID[c.rec.ID], m.byName[name] = c, c
	info := m.infoLocked(c)
	m.mu.Unlock()
	return info, nil
}

func (m *Manager) nameFree(name string) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if b, ok := m.byName[name]; ok {
		return fmt.Errorf("%w: branch %q (%s)", ErrExists, name, b.rec.State)
	}
	return nil
}

// liveChildrenLocked lists the live children of b (m.mu held).
func (m *Manager) liveChildrenLocked(b *branch) []*branch {
	var out []*branch
	for _, c := range m.byName {
		if c.rec.Parent == b.rec.ID && c.rec.State == StateLive {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rec.Name < out[j].rec.Name })
	return out
}

// descendantsLocked lists every live or invalidated descendant of b.
func (m *Manager) descendantsLocked(b *branch) []*branch {
	var out []*branch
	for _, c := range m.byName {
		if c.rec.Parent == b.rec.ID {
			out = append(out, c)
			out = append(out, m.descendantsLocked(c)...)
		}
	}
	return out
}

// Commit applies branch name to its parent atomically. If the parent has
// not changed since the fork, this is a pointer swap in one small
// transaction; otherwise the changes merge at path granularity and a path
// changed on both sides is a conflict (nothing changes). Live siblings are
// invalidated: the first commit wins.
func (m *Manager) Commit(ctx context.Context, name string) (CommitResult, error) {
	return m.CommitWith(ctx, name, CommitOptions{})
}

// CommitOptions modifies CommitWith. The zero value is Commit.
type CommitOptions struct {
	// KeepSiblings leaves the parent's other live children live: for them
	// the commit is like a write into the parent after they forked (they
	// keep seeing the parent as it was at their fork, and their own
	// commits merge with it, conflicts included). For a commit that
	// stands for a change from outside, such as `import --update --force`.
	KeepSiblings bool
}

// CommitWith is Commit with options.
func (m *Manager) CommitWith(ctx context.Context, name string, o CommitOptions) (CommitResult, error) {
	return retryChanged(ctx, m, name, func() (CommitResult, error) { return m.commitOnce(ctx, name, o) })
}

// retryChanged runs op, a lifecycle operation on branch name, again when
// it failed because another server changed a record this Manager had
// not caught up with yet (its fork or checkpoint froze a shared parent's
// top, or its commit's merge started): it reads those records first. A
// commit that won meanwhile leaves name invalidated, and op then says
// so. On a store of its own it runs op once.
func retryChanged[T any](ctx context.Context, m *Manager, name string, op func() (T, error)) (T, error) {
	if err := m.settled(ctx); err != nil {
		var zero T
		return zero, err
	}
	for attempt := 1; ; attempt++ {
		res, err := op()
		var ce *changedError
		if !m.owning() || attempt == changedAttempts || !errors.As(err, &ce) {
			return res, m.settle(ctx, err)
		}
		m.mu.RLock()
		ids := []BranchID{ce.stored.ID}
		if b, ok := m.byName[name]; ok {
			ids = append(ids, b.rec.ID, b.rec.Parent)
		}
		m.mu.RUnlock()
		if err := m.refresh(ctx, ids); err != nil {
			return res, err
		}
		sleepCtx(ctx, time.Duration(attempt)*20*time.Millisecond)
	}
}

// changedAttempts bounds retryChanged's attempts.
const changedAttempts = 8

func (m *Manager) commitOnce(ctx context.Context, name string, o CommitOptions) (CommitResult, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	c, err := m.live(name)
	if err != nil {
		return CommitResult{}, err
	}
	if c.rec.Parent == 0 {
		return CommitResult{}, fmt.Errorf("%w: %q is the root branch and has no parent to commit into", ErrReadOnly, name)
	}
	m.mu.RLock()
	kids := m.liveChildrenLocked(c)
	p := m.byID[c.rec.Parent]
	m.mu.RUnlock()
	if len(kids) > 0 {
		e := &HasChildrenError{Branch: name}
		for _, k := range kids {
			e.Children = append(e.Children, k.rec.Name)
		}
		return CommitResult{}, e
	}
	if p == nil || p.rec.State != StateLive {
		if p != nil && p.rec.State == StateInvalidated {
			return CommitResult{}, &InvalidatedError{Branch: p.rec.Name, By: p.rec.InvalidatedBy}
		}
		return CommitResult{}, fmt.Errorf("%w: parent of %q is gone", ErrStale, name)
	}
	if !m.ownedOnly(c) {
		return CommitResult{}, m.notOwner(ctx, c, "commit")
	}
	if !m.owns(p) {
		return CommitResult{}, m.notOwner(ctx, p, "commit into")
	}
	// Every transaction of the commit applies only while this server
	// owns both branches (kv.Fence); what follows the commit needs not.
	plain := ctx
	ctx = m.fenced(ctx, c, p)
	res := CommitResult{Branch: name, Parent: p.rec.Name}
	cfs, pfs := c.fs, p.fs
	cfs.Lock()
	defer cfs.Unlock()
	pfs.Lock()
	defer pfs.Unlock()
	cstack, pstack := cfs.StackLocked(), pfs.StackLocked()
	empty := !pfs.TopDirty()
	if !empty && pstack[0] == c.rec.ParentTop {
		// Written since, or unknown after a restart: look.
		if empty, err = m.cow.LayerEmpty(ctx, pstack[0]); err != nil {
			return res, err
		}
	}
	by := fmt.Sprintf("commit of %s into %s at %s", name, p.rec.Name, time.Now().UTC().Format(time.RFC3339))
	prec := p.rec
	var newStack []cowfs.LayerID
	var delta []cowfs.LayerID // fast path: the child's layers above its base
	if pstack[0] == c.rec.ParentTop && empty {
		res.FastPath = true
		prec.Top = cstack[0]
		newStack = cstack
		delta, _ = splitAtBase(cstack, c.rec.Base)
	} else {
		_, bstack := splitAtBase(cstack, c.rec.Base)
		var applied int
		if prec, newStack, applied, err = m.mergeUnlocked(ctx, c, p, pfs, cstack, bstack); err != nil {
			return res, err
		}
		res.MergedPaths, res.Changes = applied, applied
	}
	// The commit raises the parent's generation, which invalidates every
	// other child (and its descendants: see stale) in one write. The
	// transaction reads the parent's and the child's records: a commit
	// into the same parent through another Manager over the store makes
	// it conflict, and the first to commit wins.
	pold := p.rec
	if !o.KeepSiblings {
		prec.Gen, prec.LastCommit = pold.Gen+1, by
	}
	crec := c.rec
	crec.State, crec.CommitGen, crec.CommitNote, crec.Merging = StateCommitted, prec.Gen, by, 0
	m.mu.RLock()
	var sibs []*branch
	for _, s := range m.liveChildrenLocked(p) {
		if s != c && !o.KeepSiblings {
			sibs = append(sibs, s)
			sibs = append(sibs, m.descendantsLocked(s)...)
		}
	}
	m.mu.RUnlock()
	srecs := make([]record, 0, len(sibs))
	for _, s := range sibs {
		r := s.rec
		if r.State == StateLive {
			r.State, r.InvalidatedBy = StateInvalidated, by
		}
		srecs = append(srecs, r)
	}
	var purge []cowfs.InodeID
	err = m.cow.Update(ctx, func(tx *cowfs.Txn) error {
		if err := checkRecord(tx.KV(), pold); err != nil {
			return err
		}
		if err := checkRecord(tx.KV(), c.rec); err != nil {
			return err
		}
		if res.FastPath {
			// Silly-renamed files never reach the parent; the merge
			// path drops them itself.
			var err error
			if purge, err = cfs.DropSillyLocked(tx, delta); err != nil {
				return err
			}
		}
		if err := putRecord(tx.KV(), prec); err != nil {
			return err
		}
		return putRecord(tx.KV(), crec)
	})
	if err != nil {
		return res, m.commitFailed(c, err)
	}
	// The commit is in the store: mirror it in memory before the fsync, so
	// a failing fsync cannot leave memory and store disagreeing.
	pfs.SetStackLocked(newStack)
	cfs.InvalidateLocked(fmt.Errorf("%w: branch %q was committed into %q", ErrStale, name, p.rec.Name))
	m.mu.Lock()
	p.rec, c.rec = prec, crec
	delete(m.byName, name)
	m.releaseLocked(c)
	for i, s := range sibs {
		if s.rec.State == StateLive {
			s.fs.Invalidate(&InvalidatedError{Branch: s.rec.Name, By: by})
			res.Invalidated = append(res.Invalidated, s.rec.Name)
		}
		s.rec = srecs[i]
	}
	m.mu.Unlock()
	sort.Strings(res.Invalidated)
	ctx = plain
	if m.owning() {
		m.release(ctx, crec.ID)
	}
	if err := m.cow.PurgeData(ctx, cstack[0], purge); err != nil {
		// Committed; the blocks of the dropped files stay until their
		// layer is reclaimed.
		m.opts.Logger.Warn("branches: commit: blocks of dropped silly-renamed files kept", "branch", name, "err", err)
	}
	m.kickReclaim()
	if err := m.durable(ctx); err != nil {
		return res, fmt.Errorf("branches: commit %s applied but not yet durable: %w", name, mapErr(err))
	}
	return res, nil
}

// commitFailed turns the error of a commit's transaction into what
// Commit returns. When the stored parent shows a commit this Manager did
// not make (another Manager over the store committed a sibling first),
// the child is invalidated, in memory too, and the error is an
// *InvalidatedError naming that commit. The caller holds opMu and the
// child's view Lock.
func (m *Manager) commitFailed(c *branch, err error) error {
	var ce *changedError
	if !errors.As(err, &ce) || ce.stored.ID != c.rec.Parent || ce.stored.Gen <= c.rec.ForkGen {
		return fmt.Errorf("branches: commit %s: %w", c.rec.Name, mapErr(err))
	}
	ie := &InvalidatedError{Branch: c.rec.Name, By: ce.stored.LastCommit}
	c.fs.InvalidateLocked(ie)
	m.mu.Lock()
	c.rec.State, c.rec.InvalidatedBy = StateInvalidated, ie.By
	m.mu.Unlock()
	return ie
}

// mergeUnlocked merges the child's changes (cstack over bstack) into the
// parent without holding the parent's view lock for the merge, and returns
// the parent's new record and stack. The caller holds opMu and Lock on both
// views; pfs is locked again when it returns, whatever it returns.
//
// Under the lock it freezes the parent's top (freezeTop, as a fork does,
// in one small transaction): f, the parent's top from then on, takes the
// parent's writes meanwhile. It then merges into dst over the frozen stack
// with the lock released, so the parent's clients go on reading and
// writing. Under the
// lock again: if f stayed empty the result is dst over the frozen stack;
// otherwise what the parent wrote meanwhile is merged over dst into dst2
// (a merge of f's changes only), and a path both sides changed is a
// conflict, as it would have been had the parent written it before the
// commit. On any error the parent keeps f with its writes.
func (m *Manager) mergeUnlocked(ctx context.Context, c, p *branch, pfs *cowfs.View, cstack, bstack []cowfs.LayerID) (record, []cowfs.LayerID, int, error) {
	name := c.rec.Name
	dst, err := m.cow.NewLayerID(ctx)
	if err != nil {
		return record{}, nil, 0, err
	}
	// A top known to be empty (a fork froze it) takes the parent's writes
	// meanwhile as it is, and nothing changes if the merge fails.
	z, err := m.freezeTop(ctx, pfs)
	if err != nil {
		return record{}, nil, 0, err
	}
	f, frozen, prec := z.top(), z.frozen, z.record(p.rec)
	err = m.cow.Update(ctx, func(tx *cowfs.Txn) error {
		if err := z.put(tx, prec); err != nil {
			return err
		}
		if err := tx.PutLayer(dst, frozen[0]); err != nil {
			return err
		}
		return m.putMerging(tx.KV(), c, dst)
	})
	if err != nil {
		return record{}, nil, 0, m.commitFailed(c, err)
	}
	m.installTop(p, z, prec)
	m.setMerging(c, dst)

	pfs.Unlock()
	if m.mergeHook != nil {
		m.mergeHook()
	}
	conflicts, applied, err := m.cow.Merge(ctx, cstack, frozen, bstack, dst, m.ignore)
	pfs.Lock()
	if err != nil {
		return record{}, nil, 0, fmt.Errorf("branches: merge %s into %s: %w", name, p.rec.Name, mapErr(err))
	}
	if len(conflicts) > 0 {
		return record{}, nil, 0, &ConflictError{Branch: name, Parent: p.rec.Name, Paths: conflicts}
	}
	empty := !pfs.TopDirty()
	if !empty {
		if empty, err = m.cow.LayerEmpty(ctx, f); err != nil {
			return record{}, nil, 0, err
		}
	}
	if empty {
		prec.Top = dst
		return prec, append([]cowfs.LayerID{dst}, frozen...), applied, nil
	}
	// The parent wrote during the merge: merge that (small) change over
	// the result.
	dst2, err := m.cow.NewLayerID(ctx)
	if err != nil {
		return record{}, nil, 0, err
	}
	err = m.cow.Update(ctx, func(tx *cowfs.Txn) error {
		if err := tx.PutLayer(dst2, dst); err != nil {
			return err
		}
		return m.putMerging(tx.KV(), c, dst2)
	})
	if err != nil {
		return record{}, nil, 0, mapErr(err)
	}
	m.setMerging(c, dst2)
	merged := append([]cowfs.LayerID{dst}, frozen...)
	conflicts, _, err = m.cow.MergeKeepSilly(ctx, append([]cowfs.LayerID{f}, frozen...), merged, frozen, dst2, m.ignore)
	if err != nil {
		return record{}, nil, 0, fmt.Errorf("branches: merge %s into %s: %w", name, p.rec.Name, mapErr(err))
	}
	if len(conflicts) > 0 {
		return record{}, nil, 0, &ConflictError{Branch: name, Parent: p.rec.Name, Paths: conflicts}
	}
	prec.Top = dst2
	return prec, append([]cowfs.LayerID{dst2}, merged...), applied, nil
}

// putMerging stores c's record naming l, a layer its commit is about to
// merge into, in the transaction that creates l: from then on no gc on
// any server deletes l while c is live (liveRoots). The transaction
// fails if c's record changed meanwhile. The caller holds opMu.
func (m *Manager) putMerging(tx kv.Txn, c *branch, l cowfs.LayerID) error {
	if err := checkRecord(tx, c.rec); err != nil {
		return err
	}
	r := c.rec
	r.Merging = l
	return putRecord(tx, r)
}

// setMerging mirrors a committed putMerging in memory.
func (m *Manager) setMerging(c *branch, l cowfs.LayerID) {
	m.mu.Lock()
	c.rec.Merging = l
	m.mu.Unlock()
}

// Abort discards branch name and its descendants, descendants first, in
// transactions the store takes; their storage is reclaimed in the
// background.
func (m *Manager) Abort(ctx context.Context, name string) (AbortResult, error) {
	if err := m.settled(ctx); err != nil {
		return AbortResult{}, err
	}
	m.opMu.Lock()
	res, err := m.abortLocked(ctx, name)
	m.opMu.Unlock()
	return res, m.settle(ctx, err)
}

// abortLocked is Abort for a caller holding opMu.
func (m *Manager) abortLocked(ctx context.Context, name string) (AbortResult, error) {
	m.mu.RLock()
	b, ok := m.byName[name]
	var victims []*branch
	if ok {
		victims = append([]*branch{b}, m.descendantsLocked(b)...)
	}
	m.mu.RUnlock()
	if !ok {
		if err := CheckName(name); err != nil {
			return AbortResult{}, err
		}
		return AbortResult{}, fmt.Errorf("%w: branch %q", ErrNotFound, name)
	}
	if b.rec.Parent == 0 {
		return AbortResult{}, fmt.Errorf("%w: %q is the root branch and cannot be aborted", ErrReadOnly, name)
	}
	if m.owning() {
		// A branch whose owner is gone is aborted from any server.
		if err := m.takeover(ctx, b, "abort"); err != nil {
			return AbortResult{}, err
		}
	}
	// Descendants go before their ancestors (victims lists each branch
	// before its descendants), in as many transactions as the store's
	// Limits need: a crash or an error between two leaves a branch live
	// with some of its descendants aborted, a state an abort can reach
	// again.
	slices.Reverse(victims)
	// Its transactions apply only while this server owns the branch (a
	// server paused past its lease aborts nothing another took over).
	fctx := m.fenced(ctx, b)
	var res AbortResult
	lim := m.cow.KV().Limits()
	for len(victims) > 0 {
		n, bytes := 0, 0
		for n < len(victims) && 2*(n+1) <= lim.Writes {
			v, _ := json.Marshal(victims[n].rec)
			bytes += len(v) + 9 + len(nameKey(victims[n].rec.Name)) + 2*lim.OpBytes
			if n > 0 && bytes > lim.Bytes {
				break
			}
			n++
		}
		batch := victims[:max(n, 1)]
		victims = victims[len(batch):]
		recs := make([]record, len(batch))
		for i, v := range batch {
			recs[i] = v.rec
			recs[i].State = StateAborted
		}
		err := m.cow.KV().Update(fctx, func(tx kv.Txn) error {
			for i, r := range recs {
				// Another server's change since is not overwritten.
				if err := checkStored(tx, batch[i].rec); err != nil {
					return err
				}
				if err := putRecord(tx, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			if len(res.Aborted) > 0 {
				m.kickReclaim()
			}
			return res, fmt.Errorf("branches: abort %s: %w", name, mapErr(err))
		}
		m.mu.Lock()
		var owned []BranchID
		for i, v := range batch {
			if v.owned {
				owned = append(owned, v.rec.ID)
			}
			v.fs.Invalidate(fmt.Errorf("%w: branch %q was aborted", ErrStale, v.rec.Name))
			v.rec = recs[i]
			delete(m.byName, v.rec.Name)
			m.releaseLocked(v)
			res.Aborted = append(res.Aborted, v.rec.Name)
		}
		m.mu.Unlock()
		for _, id := range owned {
			m.release(ctx, id)
		}
	}
	slices.Reverse(res.Aborted)
	m.kickReclaim()
	return res, nil
}

// Checkpoint freezes the current state of branch name as label, in O(1).
func (m *Manager) Checkpoint(ctx context.Context, name, label string) (Checkpoint, error) {
	if err := CheckName(label); err != nil {
		return Checkpoint{}, err
	}
	return retryChanged(ctx, m, name, func() (Checkpoint, error) { return m.checkpointOnce(ctx, name, label) })
}

func (m *Manager) checkpointOnce(ctx context.Context, name, label string) (Checkpoint, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	b, err := m.live(name)
	if err != nil {
		return Checkpoint{}, err
	}
	if !m.owns(b) {
		return Checkpoint{}, m.notOwner(ctx, b, "checkpoint")
	}
	if _, err := m.checkpoint(ctx, b, label); err == nil {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint %q of %q", ErrExists, label, name)
	} else if !errors.Is(err, ErrNotFound) {
		return Checkpoint{}, err
	}
	bfs := b.fs
	bfs.Lock()
	defer bfs.Unlock()
	z, err := m.freezeTop(ctx, bfs)
	if err != nil {
		return Checkpoint{}, err
	}
	cp := checkpointRec{Layer: z.frozen[0], Time: time.Now().UTC()}
	rec := z.record(b.rec)
	err = m.cow.Update(m.fenced(ctx, b), func(tx *cowfs.Txn) error {
		if err := z.put(tx, rec); err != nil {
			return err
		}
		v, _ := json.Marshal(cp)
		return tx.KV().Set(cpKey(b.rec.ID, label), v)
	})
	m.cps.committed(err, map[string]cowfs.LayerID{string(cpKey(b.rec.ID, label)): cp.Layer}, nil, nil, 0)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("branches: checkpoint %s: %w", name, mapErr(err))
	}
	m.installTop(b, z, rec)
	out := Checkpoint{Branch: name, Label: label, Time: cp.Time}
	if err := m.durable(ctx); err != nil {
		return out, fmt.Errorf("branches: checkpoint %s taken but not yet durable: %w", name, mapErr(err))
	}
	return out, nil
}

func (m *Manager) checkpoint(ctx context.Context, b *branch, label string) (checkpointRec, error) {
	if err := CheckName(label); err != nil {
		return checkpointRec{}, err
	}
	var cp checkpointRec
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(cpKey(b.rec.ID, label))
		if errors.Is(err, kv.ErrNotFound) {
			return fmt.Errorf("%w: checkpoint %q of %q", ErrNotFound, label, b.rec.Name)
		}
		if err != nil {
			return err
		}
		return json.Unmarshal(v, &cp)
	})
	return cp, err
}

// Restore rolls branch name back to checkpoint label, in O(1).
func (m *Manager) Restore(ctx context.Context, name, label string) error {
	if err := m.settled(ctx); err != nil {
		return err
	}
	return m.settle(ctx, m.restoreOnce(ctx, name, label))
}

func (m *Manager) restoreOnce(ctx context.Context, name, label string) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	b, err := m.live(name)
	if err != nil {
		return err
	}
	if !m.owns(b) {
		return m.notOwner(ctx, b, "restore")
	}
	cp, err := m.checkpoint(ctx, b, label)
	if err != nil {
		return err
	}
	top, err := m.cow.NewLayerID(ctx)
	if err != nil {
		return err
	}
	stack, err := m.cow.Stack(ctx, cp.Layer)
	if err != nil {
		return err
	}
	bfs := b.fs
	bfs.Lock()
	defer bfs.Unlock()
	rec := b.rec
	rec.Top = top
	err = m.cow.Update(m.fenced(ctx, b), func(tx *cowfs.Txn) error {
		if err := checkRecord(tx.KV(), b.rec); err != nil {
			return err
		}
		if err := tx.PutLayer(top, cp.Layer); err != nil {
			return err
		}
		return putRecord(tx.KV(), rec)
	})
	if err != nil {
		return fmt.Errorf("branches: restore %s to %s: %w", name, label, mapErr(err))
	}
	bfs.SetFreshStackLocked(append([]cowfs.LayerID{top}, stack...))
	m.mu.Lock()
	b.rec = rec
	m.mu.Unlock()
	m.kickReclaim()
	if err := m.durable(ctx); err != nil {
		return fmt.Errorf("branches: restore %s applied but not yet durable: %w", name, mapErr(err))
	}
	return nil
}

// Diff lists what branch name changed since its fork point; changes under
// .git are summarised in Diff.Git.
func (m *Manager) Diff(ctx context.Context, name string) (Diff, error) {
	// Folding and reclamation rewrite layers: keep them out while reading.
	m.opMu.Lock()
	defer m.opMu.Unlock()
	b, err := m.live(name)
	if err != nil {
		return Diff{}, err
	}
	m.mu.RLock()
	in := m.infoLocked(b)
	rec := b.rec
	m.mu.RUnlock()
	d := Diff{Branch: name, Parent: in.Parent, Changes: []Change{}}
	if rec.Base == 0 {
		return d, nil // main has no fork point
	}
	stack := b.fs.Stack()
	_, bstack := splitAtBase(stack, rec.Base)
	if bstack == nil {
		return d, fmt.Errorf("branches: diff %s: fork point %d is not in the branch's stack", name, rec.Base)
	}
	changes, err := m.cow.Diff(ctx, stack, bstack, m.ignore)
	if err != nil {
		return d, err
	}
	var inGit []results.PathChange
	for _, c := range changes {
		if results.InGit(c.Path) {
			inGit = append(inGit, results.PathChange{Path: c.Path, Kind: c.Kind, Bytes: c.Bytes})
			continue
		}
		d.Changes = append(d.Changes, Change{Path: c.Path, Kind: ChangeKind(c.Kind), Type: c.Type.String(), Bytes: c.Bytes})
	}
	if len(inGit) > 0 {
		base := m.cow.View(bstack)
		defer base.Close()
		if d.Git, err = results.SummarizeGit(results.FromBilly(base.Billy()), results.FromBilly(b.fs.Billy()), inGit); err != nil {
			return d, fmt.Errorf("branches: diff %s: summarising .git: %w", name, err)
		}
	}
	return d, nil
}

// durable makes a lifecycle change durable against power loss, unless
// Options.NoLifecycleSync.
func (m *Manager) durable(ctx context.Context) error {
	if m.opts.NoLifecycleSync {
		return nil
	}
	return m.cow.Sync(ctx)
}

// settle follows a lifecycle operation that returned err. When the store
// could not say whether the operation's transaction was applied
// (kv.ErrUnknownOutcome: an etcd leader lost mid-commit), the records
// this Manager holds may be older than the stored ones: a commit applied
// though its answer was lost leaves the parent's old top and generation
// in memory, and a fork from it would take the old state and be
// invalidated by the next reload. So every record is read again before
// the error returns, and the next operation starts from the stored
// state. If that read fails too, the next operation reads them first
// (settled).
func (m *Manager) settle(ctx context.Context, err error) error {
	if !errors.Is(err, kv.ErrUnknownOutcome) {
		return err
	}
	if rerr := m.reloadAll(ctx); rerr != nil {
		m.unsettled.Store(true)
		return fmt.Errorf("%w (reading the branch records again failed too: %v; the next branch operation reads them first)", err, rerr)
	}
	m.unsettled.Store(false)
	return fmt.Errorf("%w (the branch records were read again: list the branches to see whether it was applied)", err)
}

// settled reads every record again when an unknown outcome left the
// Manager unsure of them (see settle). The caller does not hold opMu.
func (m *Manager) settled(ctx context.Context) error {
	if !m.unsettled.Load() {
		return nil
	}
	if err := m.reloadAll(ctx); err != nil {
		return fmt.Errorf("branches: an earlier operation's outcome is unknown and the branch records cannot be read again: %w; retry once the store answers", err)
	}
	m.unsettled.Store(false)
	return nil
}

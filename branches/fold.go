package branches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Folding keeps stacks shallow. Every fork of a written parent and every
// merge adds a layer, so a branch used for many fork/commit rounds grows a
// deep stack, and directory lookups probe more layers. Fold picks a frozen
// layer x whose lower neighbour y is referenced by x alone, copies x down
// into y (cowfs.FoldDown), re-points every reference to x at y in one
// transaction, and drops x from the views' stacks; the reclaimer deletes x.

// Fold folds until no branch's stack is deeper than Options.FoldDepth, and
// returns how many layers it folded.
func (m *Manager) Fold(ctx context.Context) (int, error) { return m.fold(ctx, -1) }

// fold folds at most limit layers (no bound if negative). The reclaimer
// bounds it: commits that keep coming stack new layers as fast as it
// folds, and an unbounded fold would then hold gc.mu for good.
func (m *Manager) fold(ctx context.Context, limit int) (int, error) {
	// One fold at a time: two could pick overlapping pairs (x into y while
	// y goes into z), and copies run without opMu.
	m.foldMu.Lock()
	defer m.foldMu.Unlock()
	folded := 0
	for ctx.Err() == nil && (limit < 0 || folded < limit) {
		ok, err := m.foldOne(ctx)
		if err != nil || !ok {
			return folded, err
		}
		folded++
		m.metrics.folded.Add(1)
	}
	return folded, ctx.Err()
}

func (m *Manager) foldOne(ctx context.Context) (bool, error) {
	m.opMu.Lock()
	x, y, ok, err := m.foldCandidate(ctx)
	m.opMu.Unlock()
	if err != nil || !ok {
		return false, err
	}
	// Copy without holding opMu, so forks and commits go on meanwhile.
	// Nothing can give y another referrer: y sits below x, at depth two or
	// more in every stack that holds it, and forks, restores and merges
	// only stack new layers over tops, checkpoints and fork bases.
	if err := m.cow.FoldDown(ctx, x, y); err != nil {
		return false, err
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	var below cowfs.LayerID
	err = m.cow.Read(ctx, func(tx *cowfs.Txn) error {
		var err error
		below, err = tx.Below(x)
		return err
	})
	if err != nil || below != y {
		// x was reclaimed meanwhile (its branches went away): nothing
		// references it to re-point; y goes with it.
		return true, nil
	}
	m.mu.RLock()
	var holders []*branch
	for _, b := range m.byName {
		if slices.Contains(b.fs.Stack(), x) {
			holders = append(holders, b)
		}
	}
	m.mu.RUnlock()
	// Re-point every reference to x at y, atomically.
	var recs, olds []record
	m.mu.RLock()
	for _, b := range m.byID {
		r := b.rec
		if r.State != StateLive && r.State != StateInvalidated {
			continue
		}
		if r.Base == x || r.ParentTop == x || r.Top == x {
			olds = append(olds, r)
			if r.Base == x {
				r.Base = y
			}
			if r.ParentTop == x {
				r.ParentTop = y
			}
			if r.Top == x {
				r.Top = y
			}
			recs = append(recs, r)
		}
	}
	m.mu.RUnlock()
	// The checkpoints of x, from the index: decoding every record would
	// cost a pass over all of them.
	cpKeys, err := m.cpKeysAt(ctx, x)
	if err != nil {
		return false, mapErr(err)
	}
	// opMu keeps new layers from being put over x.
	over, err := m.cow.LayersOver(ctx, x)
	if err != nil {
		return false, mapErr(err)
	}
	err = m.cow.Update(ctx, func(t *cowfs.Txn) error {
		if err := t.Repoint(x, y, over); err != nil {
			return err
		}
		tx := t.KV()
		for _, k := range cpKeys {
			v, err := tx.Get([]byte(k))
			if errors.Is(err, kv.ErrNotFound) {
				continue // a dead branch's, deleted meanwhile
			}
			if err != nil {
				return err
			}
			var cp checkpointRec
			m.cps.decodes.Add(1)
			if err := json.Unmarshal(v, &cp); err != nil {
				return fmt.Errorf("branches: corrupt checkpoint record %q: %w", k, err)
			}
			if cp.Layer != x {
				continue
			}
			cp.Layer = y
			nv, _ := json.Marshal(cp)
			if err := tx.Set([]byte(k), nv); err != nil {
				return err
			}
		}
		for i, r := range recs {
			// Another server's change since is not overwritten: the
			// fold fails and a later pass tries again.
			if err := checkStored(tx, olds[i]); err != nil {
				return err
			}
			if err := putRecord(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	m.cps.committed(err, nil, nil, cpKeys, y)
	if err != nil {
		return false, mapErr(err)
	}
	for _, b := range holders {
		b.fs.Lock()
		st := b.fs.StackLocked()
		if i := slices.Index(st, x); i >= 0 {
			b.fs.SetStackLocked(slices.Delete(st, i, i+1))
		}
		b.fs.Unlock()
	}
	m.mu.Lock()
	for _, r := range recs {
		if b, ok := m.byID[r.ID]; ok {
			b.rec = r
		}
	}
	m.mu.Unlock()
	return true, nil
}

// layerRefs counts, for every layer, the layers above it, the branch tops
// and the checkpoints that reference it, and marks as pinned those that
// must never receive another layer's keys (tops, fork bases and
// checkpoints: a fork base is the state a branch's changes are measured
// against, and folding a layer into it would make them look like part of
// the base). It also returns the stacks of the views deeper than minDepth;
// when minDepth > 0 and no view is that deep, it reads nothing from the
// store and returns no counts. Caller holds opMu.
func (m *Manager) layerRefs(ctx context.Context, minDepth int) (refs map[cowfs.LayerID]int, pinned map[cowfs.LayerID]bool, stacks [][]cowfs.LayerID, err error) {
	refs = map[cowfs.LayerID]int{}
	pinned = map[cowfs.LayerID]bool{}
	m.mu.RLock()
	for _, b := range m.byName {
		pinned[b.rec.Top] = true
		refs[b.rec.Top]++
		if b.rec.Base != 0 {
			pinned[b.rec.Base] = true
		}
		if b.fs != nil {
			if st := b.fs.Stack(); len(st) > minDepth {
				stacks = append(stacks, st)
			}
		}
	}
	m.mu.RUnlock()
	if minDepth > 0 && len(stacks) == 0 {
		return nil, nil, nil, nil
	}
	err = m.cow.Read(ctx, func(t *cowfs.Txn) error {
		over, err := t.Referrers()
		if err != nil {
			return err
		}
		for l, n := range over {
			refs[l] += n
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	// Checkpoints, from the index (no record decoded).
	err = m.cpCounts(ctx, func(l cowfs.LayerID, n int) {
		pinned[l] = true
		refs[l] += n
	})
	return refs, pinned, stacks, err
}

// foldCandidate finds a frozen layer x, in a stack deeper than FoldDepth,
// whose lower neighbour y is referenced by x alone. Caller holds opMu.
func (m *Manager) foldCandidate(ctx context.Context) (x, y cowfs.LayerID, ok bool, err error) {
	refs, pinned, stacks, err := m.layerRefs(ctx, m.opts.FoldDepth)
	if err != nil || len(stacks) == 0 {
		return 0, 0, false, err
	}
	// Re-pointing x is one transaction: a record, two writes, for every
	// branch whose base, top or parent top is x, and a read and a write
	// for every layer over x and checkpoint of it (refs[x]). An x too
	// referenced for the store's Limits (on etcd, a base shared by about
	// 60 live branches) is not folded while that lasts.
	lim := m.cow.KV().Limits()
	m.mu.RLock()
	recsAt := map[cowfs.LayerID]int{}
	for _, b := range m.byID {
		r := b.rec
		if r.State != StateLive && r.State != StateInvalidated {
			continue
		}
		for _, l := range []cowfs.LayerID{r.Base, r.ParentTop, r.Top} {
			recsAt[l]++
		}
	}
	m.mu.RUnlock()
	fits := func(x cowfs.LayerID) bool {
		return 2*recsAt[x]+refs[x] <= lim.Writes && refs[x]+1 <= lim.Reads
	}
	for _, st := range stacks {
		for i := 1; i+1 < len(st); i++ {
			if refs[st[i+1]] == 1 && !pinned[st[i+1]] && fits(st[i]) {
				return st[i], st[i+1], true, nil
			}
		}
	}
	return 0, 0, false, nil
}

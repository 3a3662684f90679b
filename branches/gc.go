package branches

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Giving disk space back. The reclaimer deletes what nothing reaches, but
// the store keeps the space of deleted values in its logs until it
// rewrites them (kv.Store.ReclaimSpace). GC runs one reclamation pass,
// prunes block references no reader can see (cowfs.PruneShadowed: after
// fast-path commits the parent's stack holds every committed version of a
// rewritten file, the older ones hidden by the newer layers above them),
// rechunks what is left in plain blocks (rechunk.go), sweeps again, and
// has the store give the space back. The reclaimer runs
// it by itself once its sweeps deleted Options.GCAfterSwept bytes of
// blocks.

// gcState serialises GC with the reclaimer's passes. Lock order: mu,
// then sweepMu or foldMu (never both), then opMu.
type gcState struct {
	// mu is held across a reclaimer pass or a GC; its read side by open
	// Trees and Tree (trees.go), which GC and the reclaimer wait for.
	mu    sync.RWMutex
	swept int64 // block bytes swept since the last GC (under mu)
	// sweepMu is held across one Reclaim: the tracker follows a single
	// sweep at a time (a second Begin would drop the first's records).
	sweepMu sync.Mutex
	// garbageSince is when each garbage layer was first seen, on a
	// shared store (under sweepMu; see graceLayers).
	garbageSince map[cowfs.LayerID]time.Time
}

// GCStats tells what GC did.
type GCStats struct {
	// Rechunk tells what rechunking after the prune did: block
	// references swapped for chunk references, chunks stored, block bytes
	// read (see Content-defined chunking in docs/design.md).
	Rechunk cowfs.RechunkStats `json:"rechunk"`
	Reclaim ReclaimStats       `json:"reclaim"`
	// Pruned counts block references deleted because the layers above
	// hide them from every reader.
	Pruned int `json:"pruned_refs"`
	// DiskBefore and DiskAfter are the bytes the store occupies on disk
	// when the store starts giving space back and after it.
	DiskBefore int64 `json:"disk_before"`
	DiskAfter  int64 `json:"disk_after"`
	// Rewrites counts the store's log files rewritten.
	Rewrites int `json:"log_rewrites"`
}

// GC reclaims what nothing reaches, prunes hidden block references, and
// gives the disk space of all that back. It runs alone with the
// background reclaimer; branches stay usable meanwhile.
func (m *Manager) GC(ctx context.Context) (GCStats, error) {
	m.gc.mu.Lock()
	defer m.gc.mu.Unlock()
	return m.gcLocked(ctx)
}

func (m *Manager) gcLocked(ctx context.Context) (GCStats, error) {
	var st GCStats
	r, err := m.Reclaim(ctx)
	st.Reclaim = r
	if err != nil {
		return st, fmt.Errorf("branches: gc: %w", err)
	}
	if st.Pruned, err = m.pruneShadowed(ctx); err != nil {
		return st, fmt.Errorf("branches: gc: prune hidden blocks: %w", mapErr(err))
	}
	// Rechunk after the prune, so that it does not chunk the hidden
	// blocks the prune deletes (after fast-path commits of rewritten
	// files, most of them), and before the sweep, which then drops the
	// blocks it replaced.
	st.Rechunk = m.rechunkStep(ctx)
	if st.Pruned > 0 || st.Rechunk.Blocks > 0 {
		r, err := m.Reclaim(ctx)
		st.Reclaim.Layers += r.Layers
		st.Reclaim.Keys += r.Keys
		st.Reclaim.Blocks += r.Blocks
		if err != nil {
			return st, fmt.Errorf("branches: gc: %w", err)
		}
	}
	ks, err := m.cow.KV().ReclaimSpace(ctx)
	st.DiskBefore, st.DiskAfter, st.Rewrites = ks.DiskBefore, ks.DiskAfter, ks.Rewrites
	if err != nil {
		return st, fmt.Errorf("branches: gc: %w", mapErr(err))
	}
	m.gc.swept = 0
	return st, nil
}

// sweptBlocks tells the background reclaimer that a pass deleted n blocks
// and runs GC once enough bytes were swept since the last one. Caller
// holds gc.mu.
func (m *Manager) sweptBlocks(ctx context.Context, n int) {
	if m.opts.GCAfterSwept < 0 {
		return
	}
	m.gc.swept += int64(n) * int64(m.opts.FS.BlockSize)
	if m.gc.swept < m.opts.GCAfterSwept {
		return
	}
	m.gcLogged(ctx, "branches: gave disk space back", 0)
}

// gcLogged runs GC for the background reclaimer and logs msg with what it
// gave back (pruned counts hidden blocks pruned just before it), or why
// it failed. Caller holds gc.mu.
func (m *Manager) gcLogged(ctx context.Context, msg string, pruned int) {
	st, err := m.gcLocked(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.opts.Logger.Warn("branches: giving disk space back failed", "err", err)
		}
		return
	}
	m.opts.Logger.Info(msg, "before", kv.FormatBytes(uint64(st.DiskBefore)),
		"after", kv.FormatBytes(uint64(max(st.DiskAfter, 0))), "pruned", pruned+st.Pruned, "blocks", st.Reclaim.Blocks, "rewrites", st.Rewrites)
}

// idleGCMin: the idle reclaimer gives space back once this much was freed
// since the last GC (less is not worth flushing and rewriting logs for).
const idleGCMin = 4 << 20

// idleGC runs when the reclaimer stayed idle for Options.GCIdle after a
// pass: the passes never prune hidden blocks (fast-path commits leave the
// replaced versions in the lower layers) and a GC waits for GCAfterSwept,
// so without it the last rounds of work before a pause would keep their
// disk space. It prunes, sweeps what that freed, and runs GC once at
// least idleGCMin bytes of blocks were freed since the last one. Caller
// holds gc.mu.
func (m *Manager) idleGC(ctx context.Context) {
	pruned, err := m.pruneShadowed(ctx)
	if err == nil && pruned > 0 {
		var r ReclaimStats
		r, err = m.Reclaim(ctx)
		// A pruned reference hid a block's worth of a file. Count the
		// references when more than the blocks freed: a GC rechunks
		// content into fewer, larger chunks (a 4 MiB file into some 100),
		// which counted as blocks fell short of idleGCMin.
		m.gc.swept += int64(max(r.Blocks, pruned)) * int64(m.opts.FS.BlockSize)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.opts.Logger.Warn("branches: pruning hidden blocks failed", "err", mapErr(err))
		}
		return
	}
	if m.gc.swept < idleGCMin {
		return
	}
	m.gcLogged(ctx, "branches: gave disk space back while idle", pruned)
}

// pruneShadowed runs cowfs.PruneShadowed on every pair of neighbours
// (x, y) of a live branch's stack where y has no referrer but x and is no
// top, checkpoint or fork base, bottom pairs first, so that a layer still
// holds its blocks when it prunes the one below. It returns how many
// references it deleted.
func (m *Manager) pruneShadowed(ctx context.Context) (int, error) {
	// Folds move layers' content and re-point stacks: not meanwhile.
	m.foldMu.Lock()
	defer m.foldMu.Unlock()
	m.opMu.Lock()
	pairs, err := m.pruneCandidates(ctx)
	m.opMu.Unlock()
	if err != nil {
		return 0, err
	}
	pruned := 0
	for _, p := range pairs {
		n, err := m.cow.PruneShadowed(ctx, p[0], p[1])
		pruned += n
		if err != nil {
			return pruned, err
		}
	}
	return pruned, nil
}

// pruneCandidates lists the pairs pruneShadowed works on, in order.
// Caller holds opMu.
func (m *Manager) pruneCandidates(ctx context.Context) ([][2]cowfs.LayerID, error) {
	refs, pinned, stacks, err := m.layerRefs(ctx, 0)
	if err != nil {
		return nil, err
	}
	var pairs [][2]cowfs.LayerID
	for _, st := range stacks {
		for i := len(st) - 2; i >= 0; i-- {
			p := [2]cowfs.LayerID{st[i], st[i+1]}
			if refs[p[1]] == 1 && !pinned[p[1]] && !slices.Contains(pairs, p) {
				pairs = append(pairs, p)
			}
		}
	}
	return pairs, nil
}

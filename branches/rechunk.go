package branches

import (
	"context"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Content-defined chunking in the background. NFS writes land as fixed
// blocks, so random writes stay cheap; each GC, after its prune, rechunks
// (cowfs.Rechunk) up to rechunkBudget bytes of runs of plain blocks in
// live layers, oldest layer first, so that data shifted by an insertion
// (a prepend, a line added near the top of a file) is stored once while
// both versions are reachable. The plain blocks it replaces become garbage that the same GC
// sweeps. Layers already rechunked hold no such run and cost one key scan.

// rechunkBudget bounds the block bytes one GC reads to rechunk.
const rechunkBudget = 256 << 20

// rechunkStep rechunks live layers for one GC and returns what it did; a
// failure only logs (the data stays as it was, in plain blocks, and the
// stats count what was swapped before it). Caller holds gc.mu.
func (m *Manager) rechunkStep(ctx context.Context) cowfs.RechunkStats {
	st, err := m.rechunk(ctx, rechunkBudget)
	if err != nil {
		if ctx.Err() == nil {
			m.opts.Logger.Warn("branches: rechunking failed; files stay in fixed blocks until the next GC", "err", err)
		}
		return st
	}
	if st.Blocks > 0 {
		m.opts.Logger.Info("branches: rechunked", "blocks", st.Blocks, "chunks", st.Chunks, "extents", st.Extents, "read", kv.FormatBytes(uint64(st.Bytes)))
	}
	return st
}

// rechunk runs cowfs.Rechunk over every live layer until budget bytes were
// read. It holds foldMu: folds and prunes rewrite frozen layers too.
func (m *Manager) rechunk(ctx context.Context, budget int64) (cowfs.RechunkStats, error) {
	var total cowfs.RechunkStats
	m.foldMu.Lock()
	defer m.foldMu.Unlock()
	var layers []cowfs.LayerID
	m.opMu.Lock()
	err := m.cow.Read(ctx, func(tx *cowfs.Txn) error {
		roots, err := m.liveRoots(tx.KV())
		if err != nil {
			return err
		}
		layers, err = tx.Reachable(roots)
		return err
	})
	m.opMu.Unlock()
	if err != nil {
		return total, mapErr(err)
	}
	for _, l := range layers {
		if total.Bytes >= budget {
			break
		}
		st, err := m.cow.Rechunk(ctx, l, budget-total.Bytes)
		total.Blocks += st.Blocks
		total.Chunks += st.Chunks
		total.Bytes += st.Bytes
		total.Extents += st.Extents
		if err != nil {
			return total, mapErr(err)
		}
	}
	return total, nil
}

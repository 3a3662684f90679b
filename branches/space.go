package branches

import (
	"context"
	"fmt"

	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv"
)

// Space accounting: where the store's disk space goes (`branchnfs
// status`) and what aborting each branch would give back (`branchnfs
// list`). Both come from one pass over a snapshot, the same as the
// sweep's mark phase: every live layer is given an owner (the one live or
// invalidated branch whose stack or checkpoints reach it, or "shared"),
// every content hash its referencing layers' owner (or "shared" when
// layers of several owners reference it), and the content keys are
// summed by owner with their sizes, read from the store's index and not
// from the values. The cost is one read of every block reference of the
// live layers and of every content key: it grows with the data stored,
// not with the number of branches, and memory holds one entry per
// referenced content hash (the sweep's own bound).

// SpaceReport tells where the store's disk space goes. JSON field names
// are part of the stable --json output and API.
type SpaceReport struct {
	// DiskBytes is the space the store's files occupy on disk: allocated
	// blocks, as du counts them; -1 when the store cannot tell (not on a
	// local disk).
	DiskBytes int64 `json:"disk_bytes"`
	// ContentBytes is the size of all stored block contents (each stored
	// once however many files use it), before the store's own overhead.
	ContentBytes int64 `json:"content_bytes"`
	// Reclaimable is what gc could give back now.
	Reclaimable Reclaimable `json:"reclaimable"`
	// Branches counts branches by state, committed and aborted included.
	Branches map[State]int `json:"branches"`
	// UniqueBytes holds, for each live and invalidated branch, the bytes
	// of content that only its own layers reference: what aborting it
	// (and gc) would give back.
	UniqueBytes map[string]int64 `json:"unique_bytes"`
	// MetadataQuota is, for metadata on an etcd cluster, its quota
	// (--quota-backend-bytes) and the database size counted against it
	// (the whole cluster's keys); absent for a local store.
	MetadataQuota *Quota `json:"metadata_quota,omitempty"`
	// BlocksInObjectStore is set when block content is in an object store
	// (S3): it has no size limit, and DiskBytes does not count it.
	BlocksInObjectStore bool `json:"blocks_in_object_store,omitempty"`
}

// Quota is a limit and how much of it is used.
type Quota struct {
	LimitBytes int64 `json:"limit_bytes"`
	UsedBytes  int64 `json:"used_bytes"`
}

// Reclaimable is what gc could give back now, by kind. Blocks that
// committed versions hide (gc prunes them, see docs/design.md) are not
// counted: telling them apart costs as much as the prune.
type Reclaimable struct {
	// UnreferencedContent is the bytes of stored content that no live
	// layer references: the next reclamation pass deletes it.
	UnreferencedContent int64 `json:"unreferenced_content_bytes"`
	// DeadLayers counts the layers no live or invalidated branch or
	// checkpoint reaches (aborted branches, replaced tops); DeadLayerKeys
	// and DeadLayerBytes are their keys and those keys' bytes (keys and
	// values; the content they reference is in UnreferencedContent).
	DeadLayers     int   `json:"dead_layers"`
	DeadLayerKeys  int   `json:"dead_layer_keys"`
	DeadLayerBytes int64 `json:"dead_layer_bytes"`
	// ValueLogGarbage is the bytes of the store's value logs that hold
	// no live value (deleted values not yet rewritten away); -1 when the
	// store cannot tell.
	ValueLogGarbage int64 `json:"value_log_garbage_bytes"`
	// Total sums the byte figures above (ValueLogGarbage when known).
	// Deleting content moves it into value-log garbage, which gc's log
	// rewrite gives back: the figures do not overlap.
	Total int64 `json:"total_bytes"`
}

// Space reports where the store's disk space goes. It reads every block
// reference of the live layers and every content and layer key (not
// block contents), and every key of the store once more for the value
// logs' garbage.
func (m *Manager) Space(ctx context.Context) (SpaceReport, error) {
	rep := SpaceReport{DiskBytes: -1, Branches: map[State]int{}, UniqueBytes: map[string]int64{}}
	rep.Reclaimable.ValueLogGarbage = -1
	sc, err := m.scanSpace(ctx, true)
	if err != nil {
		return rep, err
	}
	rep.ContentBytes = sc.content
	rep.Reclaimable.UnreferencedContent = sc.unreferenced
	rep.Reclaimable.DeadLayers, rep.Reclaimable.DeadLayerKeys, rep.Reclaimable.DeadLayerBytes = sc.deadLayers, sc.deadKeys, sc.deadBytes
	rep.Branches = sc.states
	rep.UniqueBytes = sc.uniqueByName()
	if g, ok := m.cow.KV().(kv.GarbageEstimator); ok {
		n, err := g.ValueLogGarbage(ctx)
		if err != nil {
			return rep, fmt.Errorf("branches: space: value-log garbage: %w", mapErr(err))
		}
		rep.Reclaimable.ValueLogGarbage = n
	}
	if d, ok := m.cow.KV().(kv.DiskUser); ok {
		n, err := d.DiskUsage()
		if err != nil {
			return rep, fmt.Errorf("branches: space: disk usage: %w", err)
		}
		rep.DiskBytes = n
	}
	if r, ok := m.cow.KV().(kv.SpaceReporter); ok {
		// A store in memory has no space to report; one that cannot
		// reach its cluster failed the scan above already.
		if sp, err := r.Space(); err == nil && sp.Quota {
			rep.MetadataQuota = &Quota{LimitBytes: int64(sp.TotalBytes), UsedBytes: int64(sp.TotalBytes - sp.FreeBytes)}
		}
	}
	rep.BlocksInObjectStore = m.cow.BlobsExternal()
	r := &rep.Reclaimable
	r.Total = r.UnreferencedContent + r.DeadLayerBytes + max(r.ValueLogGarbage, 0)
	return rep, nil
}

// UniqueBytes returns, for each live and invalidated branch by name, the
// bytes of content only its own layers reference: what aborting it would
// give back. See Space for what it costs.
func (m *Manager) UniqueBytes(ctx context.Context) (map[string]int64, error) {
	sc, err := m.scanSpace(ctx, false)
	if err != nil {
		return nil, err
	}
	return sc.uniqueByName(), nil
}

type spaceScan struct {
	names        map[BranchID]string
	unique       map[BranchID]int64
	states       map[State]int
	content      int64
	unreferenced int64
	deadLayers   int
	deadKeys     int
	deadBytes    int64
}

func (sc *spaceScan) uniqueByName() map[string]int64 {
	out := make(map[string]int64, len(sc.names))
	for id, name := range sc.names {
		out[name] = sc.unique[id]
	}
	return out
}

// scanSpace runs the pass described at the top of this file
// (cowfs.Txn.Space); with full it also counts dead layers and branch
// states.
func (m *Manager) scanSpace(ctx context.Context, full bool) (*spaceScan, error) {
	sc := &spaceScan{names: map[BranchID]string{}, unique: map[BranchID]int64{}, states: map[State]int{}}
	// The tops in memory and the snapshot agree under opMu.
	m.opMu.Lock()
	snap := m.cow.Snapshot()
	m.mu.RLock()
	owners := make(map[uint64][]cowfs.LayerID, len(m.byName))
	held := make(map[BranchID]State, len(m.byName)) // a stale sibling's record still says live
	for _, b := range m.byName {
		owners[uint64(b.rec.ID)] = []cowfs.LayerID{b.rec.Top}
		sc.names[b.rec.ID] = b.rec.Name
		held[b.rec.ID] = b.rec.State
	}
	m.mu.RUnlock()
	m.opMu.Unlock()
	defer snap.Discard()

	for id := range owners {
		err := snap.KV().Iterate(cpPrefix(BranchID(id)), nil, false, func(_, v []byte) (bool, error) {
			var cp checkpointRec
			if err := jsonUnmarshal(v, &cp); err != nil {
				return false, err
			}
			owners[id] = append(owners[id], cp.Layer)
			return true, nil
		})
		if err != nil {
			return nil, mapErr(err)
		}
	}
	use, err := snap.Space(ctx, owners, full)
	if err != nil {
		return nil, mapErr(err)
	}
	sc.content, sc.unreferenced = use.ContentBytes, use.Unreferenced
	for id, n := range use.Unique {
		sc.unique[BranchID(id)] = n
	}
	if !full {
		return sc, nil
	}
	sc.deadLayers, sc.deadKeys, sc.deadBytes = use.DeadLayers, use.DeadKeys, use.DeadBytes
	err = snap.KV().Iterate([]byte{'B'}, nil, false, func(k, v []byte) (bool, error) {
		var r record
		if err := jsonUnmarshal(v, &r); err != nil {
			return false, fmt.Errorf("branches: corrupt record %x: %w", k, err)
		}
		if st, ok := held[r.ID]; ok {
			r.State = st
		}
		sc.states[r.State]++
		return true, nil
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return sc, nil
}

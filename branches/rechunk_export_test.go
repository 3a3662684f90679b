package branches

import (
	"context"

	"github.com/branchnfs/branchnfs/cowfs"
)

// Rechunk runs the rechunking step of GC without a budget (for tests).
func (m *Manager) Rechunk(ctx context.Context) (cowfs.RechunkStats, error) {
	return m.rechunk(ctx, 1<<62)
}

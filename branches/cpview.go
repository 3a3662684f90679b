package branches

import (
	"context"

	"github.com/branchnfs/branchnfs/cowfs"
)

// CheckpointView returns a read-only view of checkpoint label of the live
// branch name (writes fail with EROFS), and the checkpoint. The view
// reads the checkpoint's frozen layers, which stay while the checkpoint
// does; it holds nothing else (Close is optional: it only cancels the
// view's context). Errors: ErrNotFound (no such
// branch or checkpoint), ErrInvalidated, ErrInvalidName.
func (m *Manager) CheckpointView(ctx context.Context, name, label string) (*cowfs.View, Checkpoint, error) {
	b, err := m.live(name)
	if err != nil {
		return nil, Checkpoint{}, err
	}
	cp, err := m.checkpoint(ctx, b, label)
	if err != nil {
		return nil, Checkpoint{}, err
	}
	v, err := m.cow.OpenView(ctx, cp.Layer)
	if err != nil {
		return nil, Checkpoint{}, mapErr(err)
	}
	v.SetReadOnly(true)
	return v, Checkpoint{Branch: name, Label: label, Time: cp.Time}, nil
}

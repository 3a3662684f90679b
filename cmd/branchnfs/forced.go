package main

import (
	"context"

	"github.com/branchnfs/branchnfs/branches"
)

// attemptBackend is the backend of exec and race: it commits and aborts
// even if NFS clients use the branch (README, "Branches in use"). The
// runner has ended the attempt's processes by then, and their clients (a
// userspace client such as nfs-cp never sends UMNT) are what the command
// was asked to commit or discard, not users to protect.
type attemptBackend struct{ *backend }

func (b attemptBackend) Commit(ctx context.Context, name string) (branches.CommitResult, error) {
	if b.client != nil {
		return b.client.ForceCommit(ctx, name)
	}
	return b.backend.Commit(ctx, name)
}

func (b attemptBackend) Abort(ctx context.Context, name string) (branches.AbortResult, error) {
	if b.client != nil {
		return b.client.ForceAbort(ctx, name)
	}
	return b.backend.Abort(ctx, name)
}

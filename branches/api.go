package branches

import (
	"time"

	"github.com/branchnfs/branchnfs/branches/results"
)

// BranchID names a branch for its whole life; NFS handles and fsids carry it.
// IDs are never reused.
type BranchID uint64

// State is a branch's lifecycle state.
type State string

const (
	StateLive        State = "live"
	StateInvalidated State = "invalidated" // a sibling committed first
	StateCommitted   State = "committed"   // merged into its parent
	StateAborted     State = "aborted"
)

// Info describes a branch. JSON field names are part of the stable --json
// output and API.
type Info struct {
	ID            BranchID  `json:"id"`
	Name          string    `json:"name"`
	Parent        string    `json:"parent,omitempty"` // "" for main
	ParentID      BranchID  `json:"parent_id,omitempty"`
	State         State     `json:"state"`
	InvalidatedBy string    `json:"invalidated_by,omitempty"` // which commit invalidated it
	ForkTime      time.Time `json:"fork_time"`
	ForkedFrom    string    `json:"forked_from,omitempty"` // checkpoint label it was forked from
	// Owner is the server that forked it or last took it over, when
	// several servers share the store (it owns the branch while its lease
	// lives: see Manager.Takeover).
	Owner        string   `json:"owner,omitempty"`
	BytesChanged int64    `json:"bytes_changed"` // data bytes written since the fork
	Depth        int      `json:"depth"`         // 0 for main
	Checkpoints  []string `json:"checkpoints,omitempty"`
	Children     []string `json:"children,omitempty"` // live children
}

// CommitResult tells what a commit did.
type CommitResult struct {
	Branch   string `json:"branch"`
	Parent   string `json:"parent"`
	FastPath bool   `json:"fast_path"` // parent unchanged: pointer swap
	// MergedPaths counts the directory entries and files a merge applied
	// to the parent. The fast path swaps a pointer and never looks at the
	// change (that keeps it O(1) however big the branch), so it is 0
	// there: diff the branch before committing to count what it brings.
	MergedPaths int `json:"merged_paths"`
	// Changes is kept for readers of older versions: MergedPaths after a
	// merge, left out on the fast path, where Commit does not count.
	// Callers that diffed the branch before committing (attempt records,
	// the MCP commit tool) put the diff's count of changes here.
	Changes     int      `json:"changes,omitempty"`
	Invalidated []string `json:"invalidated,omitempty"`
}

// AbortResult tells what an abort removed.
type AbortResult struct {
	Aborted []string `json:"aborted"` // the branch and its descendants
}

// Checkpoint is a frozen, immutable point of a branch.
type Checkpoint struct {
	Branch string    `json:"branch"`
	Label  string    `json:"label"`
	Time   time.Time `json:"time"`
}

// ChangeKind classifies one diff entry.
type ChangeKind string

const (
	Added    ChangeKind = "added"
	Modified ChangeKind = "modified"
	Deleted  ChangeKind = "deleted"
)

// Change is one changed path of a diff.
type Change struct {
	Path  string     `json:"path"`
	Kind  ChangeKind `json:"kind"`
	Type  string     `json:"type"`  // file, dir, symlink, fifo, socket, char, block
	Bytes int64      `json:"bytes"` // data bytes written (added/modified) or removed (deleted)
}

// Diff lists what a branch changed since its fork point, sorted by path.
// What changed under the repository directory .git at the top of the
// branch is not listed path by path but summarised in Git (HEAD moved,
// refs changed, objects added).
type Diff struct {
	Branch  string              `json:"branch"`
	Parent  string              `json:"parent,omitempty"`
	Changes []Change            `json:"changes"`
	Git     *results.GitSummary `json:"git,omitempty"`
}

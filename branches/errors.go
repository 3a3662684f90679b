package branches

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNotFound: no branch or checkpoint of that name.
	ErrNotFound = errors.New("branches: not found")
	// ErrExists: a live branch or checkpoint of that name exists.
	ErrExists = errors.New("branches: already exists")
	// ErrInvalidName: a name outside [A-Za-z0-9._-]{1,64}.
	ErrInvalidName = errors.New("branches: invalid name")
	// ErrInvalidated: the branch was invalidated by a sibling's commit; the
	// error is an *InvalidatedError naming that commit. It also matches
	// ErrStale.
	ErrInvalidated = errors.New("branches: invalidated")
	// ErrStale: the branch is no longer usable (invalidated, committed or
	// aborted).
	ErrStale = errors.New("branches: stale branch")
	// ErrConflict: a merge found paths changed on both sides; the error is a
	// *ConflictError listing them.
	ErrConflict = errors.New("branches: conflict")
	// ErrHasChildren: the branch has live children; the error is a
	// *HasChildrenError naming them.
	ErrHasChildren = errors.New("branches: has live children")
	// ErrReadOnly: the operation would write to something immutable (the
	// root branch cannot be committed or aborted, checkpoints are frozen).
	ErrReadOnly = errors.New("branches: read-only")
	// ErrInvalidPattern: an ignore pattern that path.Match rejects, or that
	// holds a '/' (patterns match base names).
	ErrInvalidPattern = errors.New("branches: invalid ignore pattern")
	// ErrNoSpace: the disk is full; nothing was changed.
	ErrNoSpace = errors.New("branches: no space left")
)

// InvalidatedError tells which commit invalidated a branch.
type InvalidatedError struct {
	Branch string
	By     string // e.g. "commit of b1 into main at 2026-12-02T12:00:00Z"
}

func (e *InvalidatedError) Error() string {
	return fmt.Sprintf("branches: branch %q was invalidated by the %s", e.Branch, e.By)
}

func (e *InvalidatedError) Is(target error) bool {
	return target == ErrInvalidated || target == ErrStale
}

// ConflictError lists the paths changed both in a branch and in its parent.
type ConflictError struct {
	Branch, Parent string
	Paths          []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("branches: cannot commit %q into %q: %d conflicting path(s): %s",
		e.Branch, e.Parent, len(e.Paths), strings.Join(e.Paths, ", "))
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// HasChildrenError names the live children that block a commit.
type HasChildrenError struct {
	Branch   string
	Children []string
}

func (e *HasChildrenError) Error() string {
	return fmt.Sprintf("branches: branch %q has live children: %s (commit or abort them first)",
		e.Branch, strings.Join(e.Children, ", "))
}

func (e *HasChildrenError) Is(target error) bool { return target == ErrHasChildren }

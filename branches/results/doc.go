// Package results turns what a branch holds into forms that leave the
// store: git-format patches (WritePatch), tar streams of a tree
// (WriteTar, read back by Extract), change sets that an apply consumes
// (WriteChangeSet, ReadChangeSet), a one-line summary of what happened
// inside a repository's .git directory (SummarizeGit), and the
// three-way apply of a change set to a folder of the user's (PlanApply,
// Applier: staging, a journal and recovery, see apply.go).
//
// It works on two read-only trees given as billy filesystems, the base
// (a branch's fork base or a checkpoint) and the head (the branch), and
// on the paths a diff reported changed between them; Expand turns those
// paths into per-path deltas, walking the subtrees of directories that
// appeared, went or changed type (a renamed directory is one change in a
// diff, but every path under it changes). It knows nothing of branch
// names or of the store, so the CLI, the control API and MCP call it the
// same way.
//
// Names are quoted as git quotes them (QuotePath) wherever they are
// printed for a person or for git; JSON carries them exactly.
//
// Errors are wrapped *fs.PathError values from the trees, or the
// sentinels of errors.go. Nothing here keeps state between calls; the
// trees must not change while a call reads them (the caller reads a
// checkpoint, or accepts that a branch written meanwhile gives a mixed
// result).
package results

// Package runner runs attempts in branches: one command in one branch
// (Exec), the first of N to succeed (Race), or the best-scored of N
// (BestOf). It ties the process supervision of package attempt to the
// branch lifecycle, through a Backend (the control API client or the
// branches manager).
//
// # Ending an attempt
//
// A tree that is stopped before it is done (timeout, Ctrl-C, a sibling's
// commit, an abort) is fenced first: its branch is aborted, or was already
// invalidated by the sibling's commit, so that its NFS file handles answer
// STALE and no process of the tree, even one that escaped supervision, can
// write any more. Then the tree gets SIGTERM, the grace period, SIGKILL,
// and the runner waits until every process is gone.
//
// An attempt that is committed is not fenced: the runner waits for its
// tree (what the leader left running gets the grace period, then is
// ended), flushes the mount (syncfs) so that the client's dirty pages
// reach the server, and commits.
//
// # Concurrency
//
// Race and BestOf run their attempts in parallel and make every lifecycle
// decision (check, commit, abort) in one goroutine, one at a time.
package runner

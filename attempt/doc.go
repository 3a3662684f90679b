// Package attempt supervises the process tree of one attempt: a command
// run in a branch, which may fork, double-fork and daemonize, and which
// must be gone, all of it, when the attempt ends.
//
// # Helper process
//
// Start does not fork the command itself. It starts a small helper (this
// same binary, which must call RunHelper first thing in main, or in
// TestMain for tests), and the helper starts the command. The helper:
//
//   - starts the command in its own session and process group (setsid);
//   - on Linux, is a child subreaper (PR_SET_CHILD_SUBREAPER): a grandchild
//     whose parent exits is re-parented to the helper, not to init, so a
//     double fork cannot escape; the helper reaps every process of the
//     tree and knows the tree is gone when it has no child left;
//   - on Linux, also puts the command in a cgroup v2 subtree of its own
//     when one is delegated to the user (the helper's cgroup is writable),
//     and then kills with cgroup.kill and waits for "populated 0". Where
//     none is delegated it says why (Info.Fallback) and relies on the
//     subreaper and the process group;
//   - on macOS, has neither: it signals the process group and waits until
//     the group is empty. A process that calls setsid escapes it there.
//
// The supervisor talks to the helper over two pipes: commands ("term",
// "kill") one way, events (started, exited, gone) the other. When the
// supervisor dies, the helper reads end-of-file and ends the tree itself
// (SIGTERM, the grace period, SIGKILL): an orphaned attempt does not run
// on. The helper ignores SIGINT, SIGQUIT and SIGHUP, so a Ctrl-C at the
// terminal reaches the supervisor, which decides.
//
// The tree runs as the same user as its helper, and may kill it. On Linux
// the supervisor is a child subreaper too (from its first Start), so what
// a dead helper leaves is re-parented to the supervisor: it kills every
// such process from another session, and all below them, reaps them by pid
// (never wait(-1), which would steal the statuses of its other children),
// and only then closes Done, with Err matching ErrHelperDied. On macOS,
// which has no subreaper, the process group and what is left of the
// tree's session are killed then; a process that left the session too
// runs on (its branch is fenced).
//
// # Ending a tree
//
// End sends SIGTERM to every process of the tree, waits the grace period
// or until the tree is gone, then sends SIGKILL (repeatedly, so that a
// process forked in between is caught too) and waits until the whole tree
// is gone, not only its leader. Fencing (making the branch's file handles
// answer STALE before the first signal) is the caller's job: this package
// knows processes, not branches.
//
// # Concurrency
//
// An Attempt's methods are safe for concurrent use. Its channels (Exited,
// Done) are closed once and never reopened.
package attempt

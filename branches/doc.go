// Package branches owns branch lifecycle: fork, commit, abort,
// checkpoints, restore, diff, invalidation and background reclamation,
// over the views of one cowfs.Store. It keeps its own records (branches,
// names, checkpoints, metadata) in the same kv.Store, through
// cowfs.Store.KV and cowfs.Txn.KV, and reaches layers only through
// cowfs's API, so a fork's new layers and its records commit in one
// transaction.
//
// Fork gives the child a new empty top layer over the parent's frozen top
// (and the parent a new top too) in one small transaction. Commit into an
// unchanged parent swaps the parent's top pointer to the child's stack in
// one small transaction; otherwise cowfs.Store.Merge writes a merged layer that
// one small transaction publishes. Either way the commit is atomic across a
// crash, and invalidates the parent's other live children (first commit
// wins). Abort flips records in one transaction; the reclaimer deletes
// unreachable layers and unreferenced blocks later. A commit never
// publishes silly-renamed files, and the store's ignore list (ignore.go)
// keeps names out of diffs and conflicts.
//
// Several servers may share one store (etcd): each Manager then follows
// the others' changes to branch records through a watch (Options.Coord,
// refresh.go), and each live branch is written through one server at a
// time, its owner, by a lease (Options.Leases, owner.go); Takeover
// claims a branch whose owner is gone.
//
// Errors are the sentinels of errors.go, tested with errors.Is; some come
// as types carrying details (InvalidatedError, ConflictError,
// HasChildrenError, NotOwnerError). Lifecycle operations are serialised
// per Manager; View and ViewByID are cheap and safe to call on every NFS
// request.
package branches

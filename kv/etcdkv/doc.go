// Package etcdkv implements kv.Store on an etcd v3 cluster, through the
// go.etcd.io/etcd/client/v3 client. It is the only package besides its test
// harness, etcdtest, that imports etcd.
//
// Snapshots: a Snapshot starts with a linearizable read of the cluster's
// current revision, and reads every key at that revision (etcd's MVCC keeps
// the history until it is compacted). A View and an attempt of an Update
// take their revision from their first read instead, a linearizable Range
// at the current revision whose answer tells the revision it read at,
// which saves a round trip. So a View sees every commit acknowledged before
// it started and none after its first read; an Update's commit checks that
// nothing it read has changed since.
//
// Prefetch (kv.Prefetcher) sends several Gets and the first page of
// several Iterates as one read-only etcd Txn, at the snapshot revision (or
// as the first read, fixing it), and serves the reads after it from the
// answer: a READ of cowfs is one request instead of one per key and range.
//
// Transactions are optimistic. An Update buffers its writes (reads see
// them) and records what it read: the mod revision of every key read by
// Get, GetFunc, Has or passed to an Iterate callback (0 for an absent key),
// and each range that an Iterate call covered, from its start to the last
// key it passed. It commits as one etcd Txn whose compares require each
// read key to have the same mod revision (so a change, a delete or a
// creation conflicts) and each iterated range to hold no key with a mod
// revision above the snapshot's (so a key inserted into the range
// conflicts too); a failed compare retries fn at a new revision. The
// per-key compares are needed because a range compare cannot see a
// deletion. A transaction without writes commits nothing.
//
// Limits: a commit holds at most Options.MaxTxnOps writes and as many
// compares, and at most Options.MaxRequestBytes; these must match the
// servers' --max-txn-ops and --max-request-bytes (128 and 1.5 MiB by
// default). Set and Delete return kv.ErrTxnTooBig as soon as the writes no
// longer fit, and Update returns it when the reads need too many compares.
// Reading many keys in an Update is therefore the costly part: large reads
// belong in a View.
//
// Error model: kv.ErrNotFound, kv.ErrReadOnly, kv.ErrTxnTooBig, kv.ErrClosed
// and kv.ErrConflict as the contract says; kv.ErrNoSpace when the cluster is
// over its --quota-backend-bytes; ErrCompacted when a View or Snapshot
// outlived the cluster's history (Update starts over instead);
// ErrUnavailable when the member reached knows no leader and refused the
// request (every request asks for that refusal, so nothing was applied;
// Update waits up to Options.RequestTimeout for a leader first); and
// kv.ErrUnknownOutcome when a commit was sent but no answer came back, in
// which case it may have been applied. Every request is bounded by
// Options.RequestTimeout.
//
// Durability: etcd acknowledges a commit once a majority of its members
// have fsynced it, so Sync has nothing left to do. Compact does nothing:
// history compaction is the server's (--auto-compaction-retention) and
// ReclaimSpace's, which compacts only history older than
// Options.Retention (default 1 hour), found from revision marks under
// MarkPrefix, so that it never fails another process's reads.
//
// URLs: OpenURL and OpenCoordURL take etcd://host:port,.../prefix (plain
// HTTP) or etcds://... (TLS, with the client's certificates from
// ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY: TLSFromEnv); an etcds://
// open reports a refused handshake at once, naming the variable to fix.
//
// Concurrency: a store is safe for concurrent use; a transaction belongs
// to the goroutine running its callback.
//
// Coord (OpenCoord) holds what several servers need besides the store, on
// the same prefix: leases kept alive in the background, keys claimed
// under a lease (gone when it is revoked or expires), and watches of a key
// prefix from a revision. A Coord and its leases are safe for concurrent
// use. Coord.ServerLease is a process's lease for kv.Leased: conditional
// transactions whose writes may be bound to it (cowfs's upload intents
// and deletion markers); its store's transactions implement
// kv.CommitChecker.
//
// Fencing: an Update under a context carrying armed kv.Fence tokens
// (kv.WithFence) adds, per token, a compare of the owner key's lease to
// the token's in its commit Txn, and an Else read of that key: a commit
// whose key another lease holds fails with kv.ErrFenced, one whose key is
// gone with kv.ErrUnavailable; neither is retried. A token takes one of
// the MaxTxnOps compares.
//
// Logging: the etcd client's own log (zap) goes to Options.Logger,
// warnings and errors only, one entry of each message per 10 s (the
// client logs a warning per retried request while the cluster has no
// quorum). Messages name keys with KeyName, never their raw bytes.
package etcdkv

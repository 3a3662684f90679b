// Package kv is branchnfs's storage interface: an ordered key-value store
// with snapshot reads and optimistic read-write transactions, plus its
// Badger v4 implementation (OpenBadger). It is the only package that imports
// Badger, so that another backend can implement Store later.
//
// Error model: ErrNotFound for missing keys; ErrTxnTooBig, ErrNoSpace and
// ErrClosed wrap the backend's error; Update retries conflicts itself and
// returns ErrConflict only when retries are exhausted.
//
// Concurrency: a Store is safe for concurrent use; a Txn belongs to the
// goroutine running its callback.
//
// Durability: SyncWrites is off by default; transactions survive a crash of
// the process once committed, and Sync makes them durable against power loss.
package kv

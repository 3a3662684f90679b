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
// the process once committed, and Sync makes every transaction committed
// before the call durable against power loss. Badger's own DB.Sync does not:
// it syncs the active memtable's write-ahead log and the newest value log
// only, while a memtable that was just rotated keeps its transactions in an
// unsynced log until its flush ends, and a full value log is rotated without
// a sync. So Sync fsyncs every write-ahead and value log that has changed
// since it was last fsynced, and the directory when logs appeared (logFiles).
// Concurrent Syncs share fsyncs, each caller getting the result of one that
// started after its call; the first failed fsync sticks (groupSync).
// Value-log GC keeps the old log until the entries it moved are synced.
//
// Full disk: Badger writes through mmaps, so a full disk would kill the
// process with SIGBUS instead of returning an error. The Badger store keeps
// a free-space reserve (BadgerOptions.Reserve) and refuses writes with
// ErrNoSpace before the disk fills; reads go on, and writes resume when
// space returns. A store opened with less than half its reserve free opens
// read-only. SpaceReporter reports the filesystem minus the reserve.
package kv

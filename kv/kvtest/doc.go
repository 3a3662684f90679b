// Package kvtest is the conformance suite of the kv.Store contract, its
// benchmarks, and the helper that opens a store for other packages' tests.
//
// RunSuite(t, open) runs every case against fresh stores from open: point
// reads and writes, read-your-writes, bytewise iteration order and prefix
// bounds, snapshot isolation of View and NewSnapshot, optimistic conflicts
// (lost updates, and reads by Get, GetFunc, Has and Iterate invalidated by
// a concurrent commit, which Update must retry from scratch), atomic abort,
// ErrReadOnly, ErrTxnTooBig, ErrClosed, context cancellation and Sync, and
// the store's Limits (an Update exactly at each bound commits, one past it
// fails). Every other transaction the suite writes stays within 100
// operations and 1 MiB of keys and values, and no value is over 512 KiB,
// so that stores with small transaction limits (etcd: 128 operations,
// 1.5 MiB per request by default) run it unchanged.
//
// RunBenchmarks(b, open) measures the same operations on any store, so that
// backends compare in one run. NewStore(tb) opens an in-memory Badger store
// that is closed when the test ends. Limited(s, limits) wraps a store to
// report and enforce smaller Limits, as etcd's, for tests of code that
// sizes its batches by them.
package kvtest

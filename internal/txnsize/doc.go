// Package txnsize measures the transactions that branch and file operations
// send to the store: Recorder wraps a kv.Store and records, for every
// committed Update, how many keys it wrote and read, how many ranges it
// iterated and how many bytes of keys and values it wrote. Its test runs
// typical operations (file writes, creates, fork, commit of branches of
// many files, abort and reclaim) and reports which would exceed the limits
// of one etcd transaction (128 operations and 128 compares, 1.5 MiB); run
//
//	go test -v -run TestReport ./internal/txnsize/
//
// docs/design.md ("Scale-out backend") records the figures. A second test
// runs the branch lifecycle on a 3-member etcd cluster through kv/etcdkv.
package txnsize

// Package nfsserver serves every live branch of a branch store over NFSv3
// and MOUNT v3 on one TCP port.
//
// # Front-end
//
// We run our own ONC RPC front-end rather than go-nfs's server loop, which
// handles one request per connection at a time. One goroutine per
// connection reads records (RFC 5531 record marking, fragments reassembled,
// at most maxRecord bytes; larger records are discarded unread and answered
// GARBAGE_ARGS) and hands each call to a worker goroutine (workers: one
// that finished a call waits to be handed the next), up to maxInFlight
// per connection; a call that reads metadata and arrives with nothing else
// in flight or waiting runs on the reading goroutine itself (inlineCall). Replies go out in completion order and never interleave:
// they are queued under the connection's write mutex, and one goroutine at a
// time writes the queue with one writev per batch, outside the mutex; clients
// match them by XID. A call is read only once its memory (its
// record's and its reply's buffers) fits in the connection's and the
// server's budgets, given back when its reply is written (memory.go): a
// client that does not read its replies stops being read, and cannot grow
// the heap. A panic in a procedure is recovered,
// logged and answered SYSTEM_ERR.
//
// # Procedures
//
// Every NFSv3 procedure (RFC 1813) and every MOUNT v3 procedure is
// implemented here over the inode-level API of cowfs.View. XDR is decoded
// from the record buffer without copying; a length that claims more bytes
// than the record holds is GARBAGE_ARGS, so absurd sizes are never
// allocated. go-nfs supplies the NFS status constants.
//
// # Exports and handles
//
// "/B" exports branch B; "/" exports a synthetic read-only directory listing
// every live branch. File handles (handle.go) carry branch id, inode
// number and generation under an HMAC keyed by the store's secret: they
// survive renames, copy-on-write and restarts, and cannot be forged into
// another branch. A handle of a branch that was invalidated, committed or
// aborted, or of a deleted inode, answers NFS3ERR_STALE.
//
// # Identity and permissions
//
// On Linux only the kernel's NFS client (a privileged source port) and
// programs of Options.AllowUIDs (the peer socket's owner, from sock_diag
// or /proc/net/tcp) may connect; others are refused (peer_linux.go).
// AUTH_UNIX credentials are checked against POSIX mode bits on every
// operation (perm.go); AUTH_NULL callers are Options.AnonUID/AnonGID. cowfs
// checks nothing itself. Two rules follow macOS's client: a create may name
// the caller's uid and one of its groups or the directory's group, and
// ACCESS grants MODIFY to the owner, since macOS asks it before chmod and
// utimes (docs/macos.md).
//
// # Errors
//
// nfsStatus (errors.go) is the one place where errors become NFS status
// codes.
//
// # Concurrency
//
// A Server is safe for concurrent use; procedures run concurrently and rely
// on cowfs for the atomicity of each operation.
package nfsserver

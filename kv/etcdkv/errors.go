package etcdkv

import "errors"

// ErrCompacted is returned by reads of a View or Snapshot whose revision the
// cluster has compacted away (its history is older than the server's
// --auto-compaction-retention). Update does not return it: it starts over
// at a newer revision.
var ErrCompacted = errors.New("etcdkv: snapshot revision compacted")

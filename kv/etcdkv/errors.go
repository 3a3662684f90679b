package etcdkv

import "errors"

// ErrCompacted is returned by reads of a View or Snapshot whose revision the
// cluster has compacted away (its history is older than the server's
// --auto-compaction-retention). Update does not return it: it starts over
// at a newer revision.
var ErrCompacted = errors.New("etcdkv: snapshot revision compacted")

// ErrUnavailable is returned when the member a request reached knows no
// leader (a majority of the cluster is down or cut off): the request was
// refused and nothing was applied. Update waits up to
// Options.RequestTimeout for a leader before it returns it.
var ErrUnavailable = errors.New("etcdkv: cluster unavailable")

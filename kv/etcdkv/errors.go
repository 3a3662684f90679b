package etcdkv

import (
	"errors"
	"fmt"

	"github.com/branchnfs/branchnfs/kv"
)

// ErrCompacted is returned by reads of a View or Snapshot whose revision the
// cluster has compacted away (its history is older than the server's
// --auto-compaction-retention). Update does not return it: it starts over
// at a newer revision.
var ErrCompacted = errors.New("etcdkv: snapshot revision compacted")

// ErrUnavailable is returned when the member a request reached knows no
// leader (a majority of the cluster is down or cut off): the request was
// refused and nothing was applied; and by a read that no member answered
// within Options.RequestTimeout. Update waits up to
// Options.RequestTimeout for a leader before it returns it. It wraps
// kv.ErrUnavailable.
var ErrUnavailable = fmt.Errorf("etcdkv: cluster unavailable: %w", kv.ErrUnavailable)

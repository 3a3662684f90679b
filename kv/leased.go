package kv

import (
	"context"
	"errors"
	"time"
)

// Leased is a conditional transaction whose writes may be bound to a
// lease of the caller's process, so that they go away by themselves when
// the process does (it stops renewing its lease, or the lease is revoked).
// It is what several servers over one store use to order what the
// kv.Store contract cannot: etcdkv implements it over etcd leases
// (etcdkv.Coord.ServerLease); a store on one server has no use for it.
type Leased interface {
	// CommitLeased applies ops in one transaction if every condition
	// holds, and reports whether it did and under which lease the leased
	// ops were put. If the process's lease was lost, a new one is granted
	// first.
	CommitLeased(ctx context.Context, conds []Cond, ops []Op) (lease int64, ok bool, err error)
	// LeaseDeadline renews lease and returns a time before which it
	// certainly lives (measured from before the renewal was sent). It
	// returns an error wrapping ErrLeaseLost if the lease is gone.
	LeaseDeadline(ctx context.Context, lease int64) (time.Time, error)
}

// ErrLeaseLost: a lease expired or was revoked, and the keys bound to it
// are gone.
var ErrLeaseLost = errors.New("kv: lease lost")

// Cond is one condition of Leased.CommitLeased.
type Cond struct {
	// Key is the key, or with Prefix every key that starts with it.
	Key    []byte
	Prefix bool
	// Absent: the key (every key under the prefix) does not exist.
	// Otherwise the key exists and holds Value (Prefix must be false).
	Absent bool
	Value  []byte
}

// Op is one write of Leased.CommitLeased.
type Op struct {
	Key, Value []byte
	// Delete deletes Key (Value and Leased are ignored).
	Delete bool
	// Leased binds the key to the caller's lease: it is deleted when the
	// lease is lost.
	Leased bool
}

// CommitChecker is implemented by the read-write transactions of a store
// whose commit can depend on a key existing when it commits, whatever the
// transaction's snapshot saw (etcdkv: a compare on the key's create
// revision). A commit whose key is gone fails as a conflict does: Update
// runs the callback again.
type CommitChecker interface {
	RequireExists(key []byte) error
}

package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/branchnfs/branchnfs/kv"
)

// ServerLease is one server's lease for the keys that say what it is
// doing right now (cowfs's upload intents and deletion markers): a
// kv.Leased over a Coord. The lease is granted on first use and granted
// again whenever it is lost, so a server that was cut off from the
// cluster for longer than the TTL goes on with a new lease (what it had
// bound to the old one is gone, which its users detect).
type ServerLease struct {
	c   *Coord
	ttl time.Duration // read only
	mu  sync.Mutex    // protects l
	l   *Lease
}

var _ kv.Leased = (*ServerLease)(nil)

// ServerLease returns a ServerLease of the given TTL on c (DefaultServerLeaseTTL
// if ttl is 0). Nothing is granted before its first use.
func (c *Coord) ServerLease(ttl time.Duration) *ServerLease {
	if ttl <= 0 {
		ttl = DefaultServerLeaseTTL
	}
	return &ServerLease{c: c, ttl: ttl}
}

// DefaultServerLeaseTTL is the TTL of a ServerLease by default: long
// enough that a collector's deletes (bounded at 10 s each) fit well
// within it, short enough that a crashed server's intents and markers go
// within a minute.
const DefaultServerLeaseTTL = 60 * time.Second

// current returns the lease, granting a new one if there is none or it
// was lost.
func (s *ServerLease) current(ctx context.Context) (*Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l != nil && s.l.Err() == nil {
		return s.l, nil
	}
	if s.l != nil {
		s.l.cancel()
	}
	l, err := s.c.Grant(ctx, s.ttl)
	if err != nil {
		return nil, err
	}
	s.l = l
	return l, nil
}

// dropLost forgets l if it is still the current lease (the cluster said
// it is gone), so the next use grants another.
func (s *ServerLease) dropLost(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == l {
		l.cancel()
		s.l = nil
	}
}

// CommitLeased implements kv.Leased: one etcd transaction with a compare
// per condition (a create revision of 0 for an absent key, over the whole
// range for a prefix; the value otherwise) and a put or delete per op.
// Its size is bounded as an Update's is (Options.MaxTxnOps compares and
// ops); an answer that is lost is kv.ErrUnknownOutcome.
func (s *ServerLease) CommitLeased(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, bool, error) {
	if s.c.s.closed.Load() {
		return 0, false, kv.ErrClosed
	}
	if len(conds) > s.c.s.opts.MaxTxnOps || len(ops) > s.c.s.opts.MaxTxnOps {
		return 0, false, fmt.Errorf("%w: a leased transaction of %d conditions and %d writes (at most %d each)", kv.ErrTxnTooBig, len(conds), len(ops), s.c.s.opts.MaxTxnOps)
	}
	for range 2 {
		l, err := s.current(ctx)
		if err != nil {
			return 0, false, err
		}
		cmps := make([]clientv3.Cmp, 0, len(conds))
		for _, c := range conds {
			k := string(c.Key)
			var cmp clientv3.Cmp
			switch {
			case c.Absent:
				cmp = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
			case c.Prefix:
				return 0, false, errors.New("etcdkv: a condition on a prefix can only ask that no key exists under it")
			default:
				cmp = clientv3.Compare(clientv3.Value(k), "=", string(c.Value))
			}
			if c.Prefix {
				cmp = cmp.WithPrefix()
			}
			cmps = append(cmps, cmp)
		}
		thens := make([]clientv3.Op, 0, len(ops))
		for _, o := range ops {
			k := string(o.Key)
			switch {
			case o.Delete:
				thens = append(thens, clientv3.OpDelete(k))
			case o.Leased:
				thens = append(thens, clientv3.OpPut(k, string(o.Value), clientv3.WithLease(l.id)))
			default:
				thens = append(thens, clientv3.OpPut(k, string(o.Value)))
			}
		}
		rctx, cancel := s.c.s.reqCtx(ctx)
		resp, err := s.c.s.kv.Txn(rctx).If(cmps...).Then(thens...).Commit()
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Lost between the check and the commit: nothing was applied.
			s.dropLost(l)
			continue
		}
		if err != nil {
			err = s.c.s.mapErr(err, 0)
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded {
				return 0, false, fmt.Errorf("%w: a leased transaction got no answer (%w)", kv.ErrUnknownOutcome, err)
			}
			return 0, false, fmt.Errorf("etcdkv: leased transaction: %w", err)
		}
		return int64(l.id), resp.Succeeded, nil
	}
	return 0, false, fmt.Errorf("%w: etcdkv: the server lease was lost twice in a row while committing; check the cluster's health", kv.ErrLeaseLost)
}

// LeaseDeadline implements kv.Leased: it renews the lease once (a
// keep-alive) and returns the time the renewal was sent plus the TTL,
// which the cluster counts from when it received it, so the lease lives
// at least until then unless revoked.
func (s *ServerLease) LeaseDeadline(ctx context.Context, lease int64) (time.Time, error) {
	s.mu.Lock()
	l := s.l
	s.mu.Unlock()
	if l == nil || int64(l.id) != lease || l.Err() != nil {
		return time.Time{}, fmt.Errorf("%w: lease %x is no longer this server's", errors.Join(kv.ErrLeaseLost, ErrLeaseLost), lease)
	}
	rctx, cancel := s.c.s.reqCtx(ctx)
	defer cancel()
	t0 := time.Now()
	resp, err := s.c.s.cli.KeepAliveOnce(rctx, l.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.dropLost(l)
		return time.Time{}, fmt.Errorf("%w: lease %x expired", errors.Join(kv.ErrLeaseLost, ErrLeaseLost), lease)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("etcdkv: renewing lease %x: %w", lease, s.c.s.mapReadErr(ctx, err, 0))
	}
	return t0.Add(time.Duration(resp.TTL) * time.Second), nil
}

var _ kv.CommitChecker = (*txn)(nil)

// RequireExists implements kv.CommitChecker: the commit compares key's
// create revision to 0 (it fails, as a conflict does, if the key is gone).
func (t *txn) RequireExists(key []byte) error {
	if !t.rw {
		return kv.ErrReadOnly
	}
	t.exists = append(t.exists, string(key))
	return nil
}

// Revoke revokes the current lease, if any: its keys go at once.
func (s *ServerLease) Revoke(ctx context.Context) error {
	s.mu.Lock()
	l := s.l
	s.l = nil
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Revoke(ctx)
}

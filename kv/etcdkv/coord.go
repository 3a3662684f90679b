package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/branchnfs/branchnfs/kv"
)

// ErrLeaseLost is returned by the operations of a Lease that expired (its
// holder did not reach the cluster for its TTL) or was revoked; Lease.Err
// returns it once Done is closed. The keys it held are gone.
var ErrLeaseLost = errors.New("etcdkv: lease lost")

// Coord is what several servers over one etcd store need besides keys and
// values: leases, which keep a key only while its holder runs (ownership
// of a branch by a server), and watches, which tell each server what the
// others changed (invalidation). Its keys share the namespace of the
// stores opened with the same Options.Prefix.
type Coord struct {
	s *store // its client, namespaced KV, options and error mapping
	w clientv3.Watcher
}

// OpenCoord connects to the cluster described by cfg. The Coord owns the
// client: Close closes it, which ends its leases' keep-alives (their keys
// go when the TTL runs out) and its watches.
func OpenCoord(cfg clientv3.Config, opts Options) (*Coord, error) {
	opts.EnsureDefaults()
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = opts.RequestTimeout
	}
	if cfg.Logger == nil && cfg.LogConfig == nil {
		cfg.Logger = clientLogger(opts.Logger)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdkv: connect to %v: %w", cfg.Endpoints, err)
	}
	s := &store{cli: cli, kv: namespace.NewKV(cli.KV, opts.Prefix), opts: opts}
	ctx, cancel := context.WithTimeout(context.Background(), opts.RequestTimeout)
	defer cancel()
	if _, err := s.revision(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcdkv: no answer from the etcd cluster at %v: %w; check that its members run and that a majority of them can reach each other", cfg.Endpoints, err)
	}
	return &Coord{s: s, w: namespace.NewWatcher(cli.Watcher, opts.Prefix)}, nil
}

// Close closes the client.
func (c *Coord) Close() error {
	if c.s.closed.Swap(true) {
		return nil
	}
	return c.s.cli.Close()
}

// Revision returns the cluster's current revision: every change committed
// before the call is at or below it (a watch from Revision+1 misses
// nothing committed after).
func (c *Coord) Revision(ctx context.Context) (int64, error) {
	return c.s.revision(ctx)
}

// Lease is a lease granted to this client and kept alive in the
// background until it is revoked, the Coord is closed, or the cluster
// could not be reached for its TTL.
type Lease struct {
	c      *Coord
	id     clientv3.LeaseID
	ttl    time.Duration
	cancel context.CancelFunc // stops the keep-alives
	done   chan struct{}
	mu     sync.Mutex // protects err
	err    error
}

// Grant grants a lease of the given TTL (etcd rounds it up to whole
// seconds, at least about 1.5 election timeouts) and keeps it alive.
func (c *Coord) Grant(ctx context.Context, ttl time.Duration) (*Lease, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	rctx, cancel := c.s.reqCtx(ctx)
	resp, err := c.s.cli.Grant(rctx, secs)
	cancel()
	if err != nil {
		// No lease was granted, or one nobody holds, which expires: a
		// cluster that does not answer is unavailable, not broken.
		return nil, fmt.Errorf("etcdkv: granting a lease: %w", c.s.mapReadErr(ctx, err, 0))
	}
	kctx, kcancel := context.WithCancel(context.Background())
	ch, err := c.s.cli.KeepAlive(kctx, resp.ID)
	if err != nil {
		kcancel()
		return nil, fmt.Errorf("etcdkv: keeping lease %x alive: %w", resp.ID, c.s.mapReadErr(ctx, err, 0))
	}
	l := &Lease{c: c, id: resp.ID, ttl: time.Duration(resp.TTL) * time.Second, cancel: kcancel, done: make(chan struct{})}
	go func() {
		// The client sends a keep-alive every third of the TTL and closes
		// the channel when the lease is revoked or expired, or when no
		// answer came for a whole TTL.
		for range ch {
		}
		l.mu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("%w: lease %x (TTL %v) was revoked, or was not renewed for its TTL (the cluster was out of reach, or this client was closed)", ErrLeaseLost, int64(l.id), l.ttl)
		}
		l.mu.Unlock()
		close(l.done)
	}()
	return l, nil
}

// ID is the lease's etcd id.
func (l *Lease) ID() int64 { return int64(l.id) }

// TTL is the lease's TTL as the cluster granted it.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Done is closed when the lease is lost; Err says why. A holder must stop
// acting as the owner of its keys then: another may have claimed them.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease lives, then ErrLeaseLost (wrapped).
func (l *Lease) Err() error {
	select {
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.err
	default:
		return nil
	}
}

// Claim sets key=value bound to the lease unless another lease or no
// lease holds key: ok is true if this lease holds key now (claiming again
// updates the value), else holder is the current value. The key goes when
// the lease does.
func (l *Lease) Claim(ctx context.Context, key, value []byte) (ok bool, holder []byte, err error) {
	if err := l.Err(); err != nil {
		return false, nil, err
	}
	k := string(key)
	rctx, cancel := l.c.s.reqCtx(ctx)
	defer cancel()
	resp, err := l.c.s.kv.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(value), clientv3.WithLease(l.id))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return false, nil, l.mapErr("claiming key "+KeyName(key), err)
	}
	if resp.Succeeded {
		return true, nil, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return l.Claim(ctx, key, value) // released meanwhile
	}
	if clientv3.LeaseID(kvs[0].Lease) != l.id {
		return false, kvs[0].Value, nil
	}
	// Ours already: update the value, unless the lease changed meanwhile.
	resp, err = l.c.s.kv.Txn(rctx).
		If(clientv3.Compare(clientv3.LeaseValue(k), "=", l.id)).
		Then(clientv3.OpPut(k, string(value), clientv3.WithLease(l.id))).
		Commit()
	if err != nil {
		return false, nil, l.mapErr("claiming key "+KeyName(key), err)
	}
	if !resp.Succeeded {
		return l.Claim(ctx, key, value)
	}
	return true, nil, nil
}

// Release deletes key if this lease holds it, and reports whether it did.
func (l *Lease) Release(ctx context.Context, key []byte) (bool, error) {
	k := string(key)
	rctx, cancel := l.c.s.reqCtx(ctx)
	defer cancel()
	resp, err := l.c.s.kv.Txn(rctx).
		If(clientv3.Compare(clientv3.LeaseValue(k), "=", l.id)).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return false, l.mapErr("releasing key "+KeyName(key), err)
	}
	return resp.Succeeded, nil
}

// Revoke ends the lease: the cluster deletes its keys at once.
func (l *Lease) Revoke(ctx context.Context) error {
	defer l.cancel()
	return l.c.Revoke(ctx, l.ID())
}

// Revoke ends the lease id, whoever holds it (an operator freeing what a
// stuck server owns): its keys are deleted at once. Revoking a lease that
// is gone already is not an error.
func (c *Coord) Revoke(ctx context.Context, id int64) error {
	rctx, cancel := c.s.reqCtx(ctx)
	defer cancel()
	_, err := c.s.cli.Revoke(rctx, clientv3.LeaseID(id))
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcdkv: revoking lease %x: %w", id, c.s.mapReadErr(ctx, err, 0))
	}
	return nil
}

func (l *Lease) mapErr(what string, err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("%w: %s: lease %x is gone", ErrLeaseLost, what, int64(l.id))
	}
	err = l.c.s.mapErr(err, 0)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded {
		// Like a commit of unknown outcome: the key may or may not be
		// set; read it (or Claim again) before relying on either.
		return fmt.Errorf("etcdkv: %s: no answer (%w): it may or may not have been applied", what, errors.Join(kv.ErrUnknownOutcome, err))
	}
	return fmt.Errorf("etcdkv: %s: %w", what, err)
}

// KeyName renders a key for messages: its leading printable bytes (a
// key's kind, such as 'O' for a branch owner), then the rest in hex, as
// O+0000000000000007; a key of printable bytes only is itself. Raw keys
// hold binary ids, which would put control bytes into logs.
func KeyName(key []byte) string {
	i := 0
	for i < len(key) && key[i] >= 0x21 && key[i] < 0x7f {
		i++
	}
	if i == len(key) {
		return string(key)
	}
	return fmt.Sprintf("%s+%x", key[:i], key[i:])
}

// Event is one change of a watched key (Key without Options.Prefix).
type Event = kv.Event

// Watch calls fn with every change of a key under prefix from revision
// from on (from 0: changes after the call), in revision order, until ctx
// ends (it returns ctx.Err()) or fn returns an error (it returns it).
// It returns ErrCompacted when from is older than the cluster's history,
// and ErrUnavailable when the member it watches through loses its leader
// (a watch through a member cut off from the others would otherwise stay
// silent): the caller watches again from the revision after the last
// event it saw, which misses nothing.
func (c *Coord) Watch(ctx context.Context, prefix []byte, from int64, fn func(Event) error) error {
	if c.s.closed.Load() {
		return kv.ErrClosed
	}
	if from <= 0 {
		rev, err := c.Revision(ctx)
		if err != nil {
			return err
		}
		from = rev + 1
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(from)}
	if len(prefix) > 0 {
		opts = append(opts, clientv3.WithPrefix())
	} else {
		opts = append(opts, clientv3.WithFromKey())
		prefix = []byte{0}
	}
	for resp := range c.w.Watch(wctx, string(prefix), opts...) {
		if resp.CompactRevision > 0 {
			return fmt.Errorf("%w: a watch from revision %d: the cluster has compacted its history up to %d; read the state again and watch from there", ErrCompacted, from, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrNoLeader) {
				return fmt.Errorf("%w: the watched etcd member lost its leader (%w); watch again from the revision after the last event", ErrUnavailable, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("etcdkv: watch: %w", c.s.mapErr(err, from))
		}
		for _, ev := range resp.Events {
			e := Event{Key: ev.Kv.Key, Revision: ev.Kv.ModRevision}
			if ev.Type == mvccpb.DELETE {
				e.Deleted = true
			} else {
				e.Value = ev.Kv.Value
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.s.closed.Load() {
		return kv.ErrClosed
	}
	return fmt.Errorf("%w: the watch ended without an error from etcd; watch again from the revision after the last event", ErrUnavailable)
}

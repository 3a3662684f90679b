package etcdkv

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/branchnfs/branchnfs/kv"
)

// Options tunes the etcd store. The zero value means defaults that match an
// etcd server started with its default flags.
type Options struct {
	// Prefix is prepended to every key, so that several stores share one
	// cluster (default "/branchnfs/"). Keys outside it are never touched.
	Prefix string
	// MaxTxnOps is the server's --max-txn-ops (default 128): a commit may
	// carry at most this many writes and at most this many compares.
	MaxTxnOps int
	// MaxRequestBytes is the server's --max-request-bytes (default 1.5 MiB).
	MaxRequestBytes int
	// RequestTimeout bounds each request to the cluster (default 10 s), so
	// that a cluster without quorum fails calls instead of hanging them.
	RequestTimeout time.Duration
	// MaxAttempts bounds the attempts of one Update before it returns
	// kv.ErrConflict (default 100).
	MaxAttempts int
	// PageSize is how many keys one range request of Iterate fetches
	// (default 256).
	PageSize int
	// Retention is how long ReclaimSpace keeps the cluster's history
	// (default 1 hour): it compacts only up to a revision that was current
	// at least this long ago (see ReclaimSpace), so a View, Snapshot or
	// watch younger than it never fails with ErrCompacted because of a
	// ReclaimSpace run by this or another process. It bounds how long
	// they may live. Negative: compact up to the current revision, for a
	// cluster that nothing else reads.
	Retention time.Duration
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with defaults.
func (o *Options) EnsureDefaults() {
	if o.Prefix == "" {
		o.Prefix = "/branchnfs/"
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = 128
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = 3 << 19 // 1.5 MiB
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 100
	}
	if o.PageSize <= 0 {
		o.PageSize = 256
	}
	if o.Retention == 0 {
		o.Retention = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// requestOverhead is what a commit request carries besides its keys and
// values: the per-operation framing and the request header. The estimate
// errs high, so a commit the store sends fits the server's limit.
const (
	requestOverhead = 512
	opOverhead      = 24
)

// store implements kv.Store on etcd v3.
type store struct {
	cli    *clientv3.Client // read only
	kv     clientv3.KV      // cli.KV under opts.Prefix; read only
	opts   Options          // read only
	closed atomic.Bool
}

var (
	_ kv.Store         = (*store)(nil)
	_ kv.SpaceReporter = (*store)(nil)
)

// Open connects to the etcd cluster described by cfg and returns a store
// keeping its keys under opts.Prefix. The store owns the client: Close
// closes it.
func Open(cfg clientv3.Config, opts Options) (kv.Store, error) {
	opts.EnsureDefaults()
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = opts.RequestTimeout
	}
	if cfg.Logger == nil && cfg.LogConfig == nil {
		cfg.Logger = clientLogger(opts.Logger)
	}
	// A commit may be as large as the server allows, plus framing.
	if cfg.MaxCallSendMsgSize == 0 {
		cfg.MaxCallSendMsgSize = opts.MaxRequestBytes + 64<<10
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdkv: connect to %v: %w", cfg.Endpoints, err)
	}
	s := &store{cli: cli, kv: namespace.NewKV(cli.KV, opts.Prefix), opts: opts}
	// Fail now, with a clear message, if no member answers.
	ctx, cancel := context.WithTimeout(context.Background(), opts.RequestTimeout)
	defer cancel()
	if _, err := s.revision(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcdkv: no answer from the etcd cluster at %v: %w; check that its members run and that a majority of them can reach each other", cfg.Endpoints, err)
	}
	return s, nil
}

// revision returns the cluster's current revision with a linearizable read:
// every transaction committed before the call is at or below it.
func (s *store) revision(ctx context.Context) (int64, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.kv.Get(rctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		return 0, s.mapReadErr(ctx, err, 0)
	}
	return resp.Header.Revision, nil
}

func (s *store) View(ctx context.Context, fn func(kv.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return kv.ErrClosed
	}
	// The revision comes with the first read (see txn.rev).
	return fn(&txn{s: s, ctx: ctx})
}

func (s *store) Update(ctx context.Context, fn func(kv.Txn) error) error {
	// waitLeader reports whether to try again after an ErrUnavailable:
	// nothing was applied, and an election takes a few election timeouts,
	// so Update waits for a leader for up to one request timeout.
	var unavailableSince time.Time
	waitLeader := func(err error) bool {
		if !errors.Is(err, ErrUnavailable) {
			return false
		}
		if unavailableSince.IsZero() {
			unavailableSince = time.Now()
		}
		if time.Since(unavailableSince) >= s.opts.RequestTimeout || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
		return true
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.closed.Load() {
			return kv.ErrClosed
		}
		// The revision comes with the first read (see txn.rev).
		t := &txn{s: s, ctx: ctx, rw: true, writes: map[string]write{}, reads: map[string]int64{}}
		err := fn(t)
		if errors.Is(err, ErrCompacted) && attempt+1 < s.opts.MaxAttempts {
			// The snapshot went away under fn: start over at a newer one.
			continue
		}
		if waitLeader(err) {
			continue
		}
		if err != nil {
			return err
		}
		ok, err := t.commit()
		if waitLeader(err) {
			continue
		}
		if err != nil || ok {
			return err
		}
		if attempt+1 >= s.opts.MaxAttempts {
			return fmt.Errorf("%w: %d attempts conflicted with other commits", kv.ErrConflict, attempt+1)
		}
		// Back off a little so contending writers interleave.
		time.Sleep(time.Duration(rand.IntN(500*(attempt+1))) * time.Microsecond)
	}
}

func (s *store) NewSnapshot() kv.Snapshot {
	if s.closed.Load() {
		return &txn{s: s, ctx: context.Background(), err: kv.ErrClosed}
	}
	// A Snapshot is at the point it was opened (callers such as a block
	// sweep rely on that), so it reads its revision now.
	ctx := context.Background()
	rev, err := s.revision(ctx)
	return &txn{s: s, ctx: ctx, rev: rev, err: err}
}

// Sync returns at once: etcd acknowledges a commit only after a majority of
// its members have written it to their raft logs and fsynced them, so every
// committed transaction is already durable against power loss.
func (s *store) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return kv.ErrClosed
	}
	return nil
}

// Size reports the backend database size of the first member that answers
// (all keys of the cluster, not only this store's prefix).
func (s *store) Size() (int64, error) {
	if s.closed.Load() {
		return 0, kv.ErrClosed
	}
	var last error
	for _, ep := range s.cli.Endpoints() {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.RequestTimeout)
		st, err := s.cli.Status(ctx, ep)
		cancel()
		if err == nil {
			return st.DbSize, nil
		}
		last = err
	}
	return 0, fmt.Errorf("etcdkv: size: no member answered: %w", s.mapErr(last, 0))
}

// Space reports the cluster's quota (--quota-backend-bytes) and how much
// of it is free, from the first member that answers: etcd refuses writes
// once a member's database reaches the quota. It counts every key of the
// cluster, not only this store's prefix. See kv.Space.Quota.
func (s *store) Space() (kv.Space, error) {
	if s.closed.Load() {
		return kv.Space{}, kv.ErrClosed
	}
	var last error
	for _, ep := range s.cli.Endpoints() {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.RequestTimeout)
		st, err := s.cli.Status(ctx, ep)
		cancel()
		if err != nil {
			last = err
			continue
		}
		quota := uint64(max(st.DbSizeQuota, 0))
		free := uint64(max(st.DbSizeQuota-st.DbSize, 0))
		return kv.Space{TotalBytes: quota, FreeBytes: free, AvailBytes: free, TotalFiles: quota, FreeFiles: free, Quota: true}, nil
	}
	return kv.Space{}, fmt.Errorf("etcdkv: space: no member answered: %w", s.mapErr(last, 0))
}

// Compact does nothing: etcd compacts its history itself when started with
// --auto-compaction-retention, and defragmentation stalls a member, so it
// is left to the operator (see docs/design.md).
func (s *store) Compact(ctx context.Context) error {
	if s.closed.Load() {
		return kv.ErrClosed
	}
	return ctx.Err()
}

// Limits follow Options: MaxTxnOps writes and as many reads (etcd checks
// each of them with a compare), and MaxRequestBytes less what a request
// carries besides its operations. A commit under fencing tokens
// (kv.Fence) compares each of them too, so it may read that many keys
// fewer. Each operation carries the store's
// prefix on its key.
func (s *store) Limits() kv.Limits {
	return kv.Limits{
		Writes:  s.opts.MaxTxnOps,
		Reads:   s.opts.MaxTxnOps,
		Bytes:   s.opts.MaxRequestBytes - requestOverhead,
		OpBytes: len(s.opts.Prefix) + opOverhead,
	}
}

// ReclaimSpace compacts the cluster's history (for every prefix, not only
// this store's) and defragments each member in turn, which gives the
// space of deleted and overwritten values back to the filesystem. A
// defragmentation blocks reads and writes on its member while it runs.
//
// Several processes read the cluster at once, so it never compacts to the
// current revision (that would fail every View, Snapshot and watch open
// elsewhere at an older one) but to a revision that was current at least
// Options.Retention ago. It learns which from revision marks: keys under
// MarkPrefix, cluster-wide like a compaction, that map a revision to the
// time it was current. Each call records the current revision (unless a
// mark younger than a tenth of the retention exists), compacts up to the
// newest mark older than the retention, and deletes the marks at or
// below it; so a cluster holds about eleven marks, and the first calls on
// a new cluster compact nothing. Marks are judged by each writer's clock,
// so the servers' clocks must agree to well within the retention. With a
// negative retention it compacts to the current revision. DiskBefore and
// DiskAfter are the database size of the first member that answers.
func (s *store) ReclaimSpace(ctx context.Context) (kv.ReclaimStats, error) {
	var st kv.ReclaimStats
	if s.closed.Load() {
		return st, kv.ErrClosed
	}
	var err error
	if st.DiskBefore, err = s.Size(); err != nil {
		return st, err
	}
	rev, err := s.compactTarget(ctx)
	if err != nil {
		return st, err
	}
	if rev > 0 {
		cctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
		_, err = s.cli.Compact(cctx, rev, clientv3.WithCompactPhysical())
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			return st, fmt.Errorf("etcdkv: reclaim space: compact to revision %d: %w", rev, s.mapErr(err, 0))
		}
		if err := s.dropMarks(ctx, rev); err != nil {
			return st, err
		}
	}
	for _, ep := range s.cli.Endpoints() {
		// Defragmentation rewrites the member's whole database.
		dctx, cancel := context.WithTimeout(ctx, 10*s.opts.RequestTimeout)
		_, err := s.cli.Defragment(dctx, ep)
		cancel()
		if err != nil {
			return st, fmt.Errorf("etcdkv: reclaim space: defragment %s: %w", ep, s.mapErr(err, 0))
		}
	}
	st.DiskAfter, err = s.Size()
	return st, err
}

// MarkPrefix is where ReclaimSpace keeps its revision marks: one key per
// mark, MarkPrefix + the revision in 20 decimal digits, whose value is
// the time it was current in Unix nanoseconds. They are outside every
// store's prefix because a compaction is cluster-wide: every store on the
// cluster, whatever its prefix, shares them.
const MarkPrefix = "/branchnfs-compaction-marks/"

func markKey(rev int64) string { return fmt.Sprintf("%s%020d", MarkPrefix, rev) }

// compactTarget records a revision mark when none is recent and returns
// the revision to compact up to: the newest mark older than the
// retention, 0 for none (or the current revision, with a negative
// retention).
func (s *store) compactTarget(ctx context.Context) (int64, error) {
	if s.opts.Retention < 0 {
		return s.revision(ctx)
	}
	rctx, cancel := s.reqCtx(ctx)
	resp, err := s.cli.Get(rctx, MarkPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, fmt.Errorf("etcdkv: reclaim space: read the revision marks under %s: %w", MarkPrefix, s.mapErr(err, 0))
	}
	now := time.Now()
	var target int64
	var newest time.Time
	for _, m := range resp.Kvs { // in key order: oldest revision first
		rev, err1 := strconv.ParseInt(strings.TrimPrefix(string(m.Key), MarkPrefix), 10, 64)
		ns, err2 := strconv.ParseInt(string(m.Value), 10, 64)
		if err1 != nil || err2 != nil {
			s.opts.Logger.Warn("etcdkv: reclaim space: a revision mark that is not one; delete it with etcdctl", "key", string(m.Key))
			continue
		}
		at := time.Unix(0, ns)
		if !now.Before(at.Add(s.opts.Retention)) {
			target = rev
		}
		if at.After(newest) {
			newest = at
		}
	}
	if now.Sub(newest) >= s.opts.Retention/10 {
		// The revision first, the time after: a View that starts after
		// that time reads at this revision or a newer one.
		rev, err := s.revision(ctx)
		if err != nil {
			return 0, err
		}
		rctx, cancel := s.reqCtx(ctx)
		defer cancel()
		_, err = s.cli.Put(rctx, markKey(rev), strconv.FormatInt(time.Now().UnixNano(), 10))
		if err := s.mapErr(err, 0); errors.Is(err, kv.ErrNoSpace) {
			// Over quota the compaction matters most: go on with the
			// marks there are.
			s.opts.Logger.Warn("etcdkv: reclaim space: no room for a revision mark; compacting up to the older marks", "err", err)
		} else if err != nil {
			return 0, fmt.Errorf("etcdkv: reclaim space: record a revision mark: %w", err)
		}
	}
	return target, nil
}

// dropMarks deletes the revision marks at or below rev, which a later
// compaction no longer needs.
func (s *store) dropMarks(ctx context.Context, rev int64) error {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	if _, err := s.cli.Delete(rctx, MarkPrefix, clientv3.WithRange(markKey(rev+1))); err != nil {
		return fmt.Errorf("etcdkv: reclaim space: delete the revision marks up to %d: %w", rev, s.mapErr(err, 0))
	}
	return nil
}

// Close closes the client; closing again returns nil.
func (s *store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.cli.Close()
}

// mapErr turns client errors into kv and etcdkv errors, keeping the
// original wrapped. rev is the snapshot revision of the failed read, if any.
func (s *store) mapErr(err error, rev int64) error {
	switch {
	case err == nil:
		return nil
	case s.closed.Load():
		return fmt.Errorf("%w: %w", kv.ErrClosed, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: the snapshot at revision %d is older than the cluster's compacted history (%w); retry the operation; a View or Snapshot must not outlive the cluster's --auto-compaction-retention nor Options.Retention (1 hour by default)", ErrCompacted, rev, err)
	case errors.Is(err, rpctypes.ErrNoLeader):
		return fmt.Errorf("%w: the etcd member has no leader (%w): a majority of the cluster's members is down or cut off from the others; nothing was applied", ErrUnavailable, err)
	case errors.Is(err, rpctypes.ErrNoSpace):
		return fmt.Errorf("%w: the etcd cluster is over its --quota-backend-bytes (%w); compact and defragment it, then run 'etcdctl alarm disarm'", kv.ErrNoSpace, err)
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge), status.Code(err) == codes.ResourceExhausted:
		return fmt.Errorf("%w: the etcd server refused the commit (%w); its --max-txn-ops or --max-request-bytes is lower than Options says", kv.ErrTxnTooBig, err)
	}
	return err
}

// mapReadErr is mapErr for a read, which changes nothing: when the
// request's own time-out passed (ctx, the caller's, still runs) or no
// member could be reached, the cluster is unavailable, and the caller may
// try again later.
func (s *store) mapReadErr(ctx context.Context, err error, rev int64) error {
	mapped := s.mapErr(err, rev)
	if ctx.Err() != nil || errors.Is(mapped, ErrUnavailable) || s.closed.Load() {
		return mapped
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Unavailable {
		return fmt.Errorf("%w: no etcd member answered a read within %v (%w); check that a majority of the cluster's members run and reach each other",
			ErrUnavailable, s.opts.RequestTimeout, err)
	}
	return mapped
}

// write is one buffered Set (del false) or Delete.
type write struct {
	val []byte
	del bool
}

// keyRange is a range [start, end) that an Iterate call read to its end.
type keyRange struct{ start, end []byte }

// txn is a transaction at snapshot revision rev. A read-write txn buffers
// its writes and records what it read, to commit with compares: each key
// read must still have the mod revision it had at rev (0: still absent),
// and each iterated range must hold no key modified after rev.
type txn struct {
	s   *store
	ctx context.Context
	// rev is the snapshot revision. A Snapshot takes it when it opens; a
	// View or Update from its first read (0 until then, which etcd reads
	// as "now"), a linearizable Range whose answer's header gives the
	// revision it read at: every later read is at that revision, so the
	// transaction is a consistent snapshot that sees every commit
	// acknowledged before it began, at one Range less than reading the
	// revision first. A View that reads nothing sends nothing; an Update
	// commits with compares, so a write-only Update costs one round trip.
	rev int64
	err error // set when the snapshot could not be opened: every read fails
	rw  bool

	writes map[string]write // buffered writes by key
	bytes  int              // estimated request bytes of the writes
	reads  map[string]int64 // mod revision of each key read from the store
	ranges []keyRange       // ranges iterated
	exists []string         // keys that must exist at commit (RequireExists)

	// What Prefetch read at rev, served to the reads after it.
	pfKeys  map[string]*mvccpb.KeyValue // by key; nil value: absent
	pfPages []page
}

// page is the first page of an Iterate over [lo, hi) that Prefetch read.
type page struct {
	lo, hi   string
	keysOnly bool
	kvs      []*mvccpb.KeyValue
	more     bool // the range holds more keys than kvs
}

var _ kv.Prefetcher = (*txn)(nil)

func (t *txn) reqCtx() (context.Context, context.CancelFunc) {
	return t.s.reqCtx(t.ctx)
}

// reqCtx bounds one request by Options.RequestTimeout and asks the member
// to refuse it at once when it knows no leader (etcd's "require leader"),
// instead of holding it until the timeout: a refusal is a clean failure,
// where a timed-out commit has an unknown outcome.
func (s *store) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(clientv3.WithRequireLeader(ctx), s.opts.RequestTimeout)
}

// get is one Range at the snapshot revision (0: the current one, which
// the answer's header gives). It is linearizable: a serializable Range at
// the revision would skip the member's read index, but a member behind the
// one that gave the revision (the client spreads requests over the
// members) answers it with ErrFutureRev, which the client logs as a
// warning each time.
func (t *txn) get(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := t.reqCtx()
	defer cancel()
	return t.s.kv.Get(ctx, key, append(opts, clientv3.WithRev(t.rev))...)
}

// fetch reads key at the snapshot revision, recording the read.
func (t *txn) fetch(key []byte, keysOnly bool) ([]byte, bool, error) {
	if t.err != nil {
		return nil, false, t.err
	}
	if t.s.closed.Load() {
		return nil, false, kv.ErrClosed
	}
	if w, ok := t.writes[string(key)]; ok {
		return w.val, !w.del, nil
	}
	e, prefetched := t.pfKeys[string(key)]
	if !prefetched {
		var opts []clientv3.OpOption
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		resp, err := t.get(string(key), opts...)
		if err != nil {
			return nil, false, t.s.mapReadErr(t.ctx, err, t.rev)
		}
		t.rev = cmp.Or(t.rev, resp.Header.Revision)
		if len(resp.Kvs) > 0 {
			e = resp.Kvs[0]
		}
	}
	var modRev int64
	var val []byte
	if e != nil {
		modRev, val = e.ModRevision, e.Value
		if val == nil {
			val = []byte{}
		}
	}
	if t.rw {
		if _, seen := t.reads[string(key)]; !seen {
			t.reads[string(key)] = modRev
		}
	}
	return val, e != nil, nil
}

func (t *txn) Get(key []byte) ([]byte, error) {
	v, ok, err := t.fetch(key, false)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, kv.ErrNotFound
	}
	return slices.Clone(v), nil
}

func (t *txn) GetFunc(key []byte, fn func([]byte) error) error {
	v, ok, err := t.fetch(key, false)
	if err != nil {
		return err
	}
	if !ok {
		return kv.ErrNotFound
	}
	return fn(v)
}

func (t *txn) Has(key []byte) (bool, error) {
	_, ok, err := t.fetch(key, true)
	return ok, err
}

// Iterate merges the store's keys at the snapshot revision, fetched a page
// at a time, with the transaction's own buffered writes.
func (t *txn) Iterate(prefix, start []byte, keysOnly bool, fn func(k, v []byte) (bool, error)) error {
	if t.err != nil {
		return t.err
	}
	if t.s.closed.Load() {
		return kv.ErrClosed
	}
	lo, hi := iterBounds(prefix, start)
	inRange := func(k []byte) bool {
		return bytes.Compare(k, lo) >= 0 && (len(prefix) == 0 || bytes.Compare(k, hi) < 0)
	}
	// The buffered writes in range, in key order.
	var pending []string
	for k := range t.writes {
		if inRange([]byte(k)) {
			pending = append(pending, k)
		}
	}
	slices.Sort(pending)
	// emit passes one key to fn; a pending delete hides it.
	emit := func(k []byte, v []byte, fromStore bool, modRev int64) (bool, error) {
		if fromStore && t.rw {
			if _, seen := t.reads[string(k)]; !seen {
				t.reads[string(k)] = modRev
			}
		}
		if keysOnly {
			v = nil
		} else if v == nil {
			v = []byte{}
		}
		return fn(k, v)
	}
	// stop records the range read up to and including key last (nil: to
	// the end of the range) and ends the iteration.
	stop := func(last []byte, err error) error {
		if t.rw && err == nil {
			end := hi
			if last != nil {
				end = append(slices.Clone(last), 0)
			}
			t.ranges = append(t.ranges, keyRange{start: slices.Clone(lo), end: end})
		}
		return err
	}
	// flushPending emits pending sets before key k (nil: all of them).
	flushPending := func(k []byte) ([]byte, bool, error) {
		for len(pending) > 0 && (k == nil || pending[0] < string(k)) {
			pk := pending[0]
			pending = pending[1:]
			w := t.writes[pk]
			if w.del {
				continue
			}
			more, err := emit([]byte(pk), w.val, false, 0)
			if err != nil || !more {
				return []byte(pk), false, err
			}
		}
		return nil, true, nil
	}
	from := lo
	for {
		var kvs []*mvccpb.KeyValue
		var more bool
		if p := t.prefetchedPage(from, hi, keysOnly); p != nil {
			kvs, more = p.kvs, p.more
		} else {
			resp, err := t.get(string(from), t.pageOpts(hi, keysOnly, 0)...)
			if err != nil {
				return t.s.mapReadErr(t.ctx, err, t.rev)
			}
			t.rev = cmp.Or(t.rev, resp.Header.Revision)
			kvs, more = resp.Kvs, resp.More
		}
		for _, e := range kvs {
			if last, more, err := flushPending(e.Key); err != nil || !more {
				return stop(last, err)
			}
			if len(pending) > 0 && pending[0] == string(e.Key) {
				w := t.writes[pending[0]]
				pending = pending[1:]
				if w.del {
					continue
				}
				if more, err := emit(e.Key, w.val, false, 0); err != nil || !more {
					return stop(e.Key, err)
				}
				continue
			}
			if more, err := emit(e.Key, e.Value, true, e.ModRevision); err != nil || !more {
				return stop(e.Key, err)
			}
		}
		if !more || len(kvs) == 0 {
			break
		}
		from = append(slices.Clone(kvs[len(kvs)-1].Key), 0)
	}
	if last, more, err := flushPending(nil); err != nil || !more {
		return stop(last, err)
	}
	return stop(nil, nil)
}

// iterBounds returns the etcd range [lo, hi) of an Iterate of prefix
// from start.
func iterBounds(prefix, start []byte) (lo, hi []byte) {
	lo = prefix
	if bytes.Compare(start, prefix) > 0 {
		lo = start
	}
	if len(lo) == 0 {
		lo = []byte{0} // etcd has no empty key
	}
	hi = []byte(clientv3.GetPrefixRangeEnd(string(prefix)))
	if len(prefix) == 0 {
		hi = []byte{0} // etcd's "every key from lo on"
	}
	return lo, hi
}

// pageOpts are the options of the range read of one page of an Iterate
// up to hi: PageSize keys, or limit if it is above 0 and below it.
func (t *txn) pageOpts(hi []byte, keysOnly bool, limit int) []clientv3.OpOption {
	n := t.s.opts.PageSize
	if limit > 0 && limit < n {
		n = limit // a READ's 32 block references, not a page of 256
	}
	opts := []clientv3.OpOption{clientv3.WithRange(string(hi)), clientv3.WithLimit(int64(n))}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return opts
}

// prefetchedPage returns the page Prefetch read from lo up to hi with
// (at least) the values keysOnly asks for, nil if none.
func (t *txn) prefetchedPage(lo, hi []byte, keysOnly bool) *page {
	for i := range t.pfPages {
		p := &t.pfPages[i]
		if p.lo == string(lo) && p.hi == string(hi) && (keysOnly || !p.keysOnly) {
			return p
		}
	}
	return nil
}

// Prefetch reads keys and the first page of each range in one etcd
// Txn of range reads at the snapshot revision (the current one, which
// it fixes, if nothing was read yet): a read-only Txn is served, like a
// Range, with a linearizable read on the member, outside raft. A key or
// range already prefetched, and a key the transaction wrote, is not read
// again; what does not fit in one Txn (Options.MaxTxnOps) is left to the
// reads that need it.
func (t *txn) Prefetch(keys [][]byte, ranges []kv.IterRange) error {
	if t.err != nil {
		return t.err
	}
	if t.s.closed.Load() {
		return kv.ErrClosed
	}
	type want struct {
		key  []byte
		page *page // nil: key
	}
	var wants []want
	var ops []clientv3.Op
	for _, k := range keys {
		if len(ops) == t.s.opts.MaxTxnOps {
			break
		}
		if _, ok := t.pfKeys[string(k)]; ok {
			continue
		}
		if _, ok := t.writes[string(k)]; ok {
			continue
		}
		wants = append(wants, want{key: k})
		ops = append(ops, clientv3.OpGet(string(k), clientv3.WithRev(t.rev)))
	}
	for _, r := range ranges {
		if len(ops) == t.s.opts.MaxTxnOps {
			break
		}
		lo, hi := iterBounds(r.Prefix, r.Start)
		if t.prefetchedPage(lo, hi, r.KeysOnly) != nil {
			continue
		}
		wants = append(wants, want{page: &page{lo: string(lo), hi: string(hi), keysOnly: r.KeysOnly}})
		ops = append(ops, clientv3.OpGet(string(lo), append(t.pageOpts(hi, r.KeysOnly, r.Limit), clientv3.WithRev(t.rev))...))
	}
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := t.reqCtx()
	defer cancel()
	resp, err := t.s.kv.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return t.s.mapReadErr(t.ctx, err, t.rev)
	}
	if len(resp.Responses) != len(wants) {
		return fmt.Errorf("etcdkv: prefetch: %d answers to %d reads from the etcd cluster", len(resp.Responses), len(wants))
	}
	t.rev = cmp.Or(t.rev, resp.Header.Revision)
	if t.pfKeys == nil {
		t.pfKeys = make(map[string]*mvccpb.KeyValue, len(keys))
	}
	for i, w := range wants {
		rr := resp.Responses[i].GetResponseRange()
		if rr == nil {
			return fmt.Errorf("etcdkv: prefetch: the etcd cluster answered read %d with no range", i)
		}
		if w.page == nil {
			var e *mvccpb.KeyValue
			if len(rr.Kvs) > 0 {
				e = rr.Kvs[0]
			}
			t.pfKeys[string(w.key)] = e
			continue
		}
		w.page.kvs, w.page.more = rr.Kvs, rr.More
		t.pfPages = append(t.pfPages, *w.page)
	}
	return nil
}

func (t *txn) Set(key, value []byte) error {
	return t.put(key, write{val: slices.Clone(value)})
}

func (t *txn) Delete(key []byte) error {
	return t.put(key, write{del: true})
}

func (t *txn) put(key []byte, w write) error {
	if !t.rw {
		return kv.ErrReadOnly
	}
	if t.s.closed.Load() {
		return kv.ErrClosed
	}
	if w.val == nil && !w.del {
		w.val = []byte{}
	}
	old, had := t.writes[string(key)]
	size := len(t.s.opts.Prefix) + len(key) + len(w.val) + opOverhead
	if had {
		size -= len(t.s.opts.Prefix) + len(key) + len(old.val) + opOverhead
	}
	if !had && len(t.writes)+1 > t.s.opts.MaxTxnOps {
		return fmt.Errorf("%w: an etcd transaction holds at most %d writes (the server's --max-txn-ops); split the operation or raise the limit on every member and in Options.MaxTxnOps", kv.ErrTxnTooBig, t.s.opts.MaxTxnOps)
	}
	if t.bytes+size+requestOverhead > t.s.opts.MaxRequestBytes {
		return fmt.Errorf("%w: the transaction's writes would exceed %d bytes (the server's --max-request-bytes); split the operation or raise the limit on every member and in Options.MaxRequestBytes", kv.ErrTxnTooBig, t.s.opts.MaxRequestBytes)
	}
	t.bytes += size
	t.writes[string(key)] = w
	return nil
}

func (t *txn) Discard() {}

// commit sends the buffered writes guarded by the compares of what the
// transaction read. It reports false when a compare failed (a conflict).
func (t *txn) commit() (bool, error) {
	if len(t.writes) == 0 {
		return true, nil // nothing to commit; the reads were a snapshot
	}
	prefix := len(t.s.opts.Prefix)
	var cmps []clientv3.Cmp
	reqBytes := t.bytes + requestOverhead
	readKeys := make([]string, 0, len(t.reads))
	for k := range t.reads {
		readKeys = append(readKeys, k)
	}
	slices.Sort(readKeys)
	for _, k := range readKeys {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", t.reads[k]))
		reqBytes += prefix + len(k) + opOverhead
	}
	for _, r := range t.ranges {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(r.start)), "<", t.rev+1).WithRange(string(r.end)))
		reqBytes += 2*prefix + len(r.start) + len(r.end) + opOverhead
	}
	for _, k := range t.exists {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), ">", 0))
		reqBytes += prefix + len(k) + opOverhead
	}
	// The fencing tokens of the context: the commit applies only if each
	// owner key is still bound to its lease (kv.Fence). On failure the
	// Else branch reads the owner keys, to tell a lost ownership from a
	// conflict.
	fences, err := fenceTokens(t.ctx)
	if err != nil {
		return false, err // not sent
	}
	if len(cmps)+len(fences) > t.s.opts.MaxTxnOps {
		return false, fmt.Errorf("%w: the transaction read %d keys and %d ranges under %d fencing tokens, and an etcd transaction checks at most %d (the server's --max-txn-ops); read less in read-write transactions (use a View for large reads) or raise the limit on every member and in Options.MaxTxnOps",
			kv.ErrTxnTooBig, len(t.reads), len(t.ranges), len(fences), t.s.opts.MaxTxnOps)
	}
	var elses []clientv3.Op
	for _, f := range fences {
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(string(f.Key)), "=", clientv3.LeaseID(f.Lease)))
		elses = append(elses, clientv3.OpGet(string(f.Key), clientv3.WithKeysOnly()))
		reqBytes += 2 * (prefix + len(f.Key) + opOverhead)
	}
	if reqBytes > t.s.opts.MaxRequestBytes {
		return false, fmt.Errorf("%w: the commit would be about %d bytes, over the server's --max-request-bytes of %d; split the operation or raise the limit on every member and in Options.MaxRequestBytes",
			kv.ErrTxnTooBig, reqBytes, t.s.opts.MaxRequestBytes)
	}
	keys := make([]string, 0, len(t.writes))
	for k := range t.writes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ops := make([]clientv3.Op, 0, len(keys))
	for _, k := range keys {
		if w := t.writes[k]; w.del {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.val)))
		}
	}
	if err := t.ctx.Err(); err != nil {
		return false, err // not sent
	}
	ctx, cancel := t.reqCtx()
	defer cancel()
	resp, err := t.s.kv.Txn(ctx).If(cmps...).Then(ops...).Else(elses...).Commit()
	if err != nil {
		mapped := t.s.mapErr(err, t.rev)
		if errors.Is(mapped, kv.ErrTxnTooBig) || errors.Is(mapped, kv.ErrNoSpace) || errors.Is(mapped, ErrCompacted) || errors.Is(mapped, ErrUnavailable) {
			return false, mapped // refused by the server: nothing applied
		}
		// The request may have reached the leader and been applied while
		// the answer was lost (timeout, cancel, lost connection).
		return false, fmt.Errorf("%w: the commit of %d writes got no answer from the etcd cluster (%w): it may or may not have been applied; read the state again before retrying",
			kv.ErrUnknownOutcome, len(ops), mapped)
	}
	if !resp.Succeeded {
		if err := fenceFailed(fences, resp.Responses); err != nil {
			return false, err
		}
	}
	return resp.Succeeded, nil
}

// fenceTokens returns the tokens of the fences ctx carries (kv.Fences)
// that are armed, or the error of one that refuses every commit.
func fenceTokens(ctx context.Context) ([]kv.FenceToken, error) {
	var toks []kv.FenceToken
	for _, f := range kv.Fences(ctx) {
		tok, ok, err := f.Token()
		if err != nil {
			return nil, err
		}
		if ok {
			toks = append(toks, tok)
		}
	}
	if len(toks) > kv.MaxFences {
		return nil, fmt.Errorf("etcdkv: a commit under %d fencing tokens, at most %d", len(toks), kv.MaxFences)
	}
	return toks, nil
}

// fenceFailed reads the answers to the Else reads of a failed commit (one
// per fencing token): an owner key bound to another lease is
// kv.ErrFenced; a key that is gone (its owner's lease expired, and no
// process claimed it since) is ErrUnavailable, since its owner may claim
// it again (kv.ErrUnavailable, not ErrUnavailable: Update does not wait
// for it); nil when every token held (a conflict).
func fenceFailed(toks []kv.FenceToken, answers []*etcdserverpb.ResponseOp) error {
	var gone error
	for i, tok := range toks {
		if i >= len(answers) {
			break
		}
		rr := answers[i].GetResponseRange()
		if rr == nil {
			continue
		}
		if len(rr.Kvs) == 0 {
			if gone == nil {
				gone = fmt.Errorf("%w: the ownership of %s went with the lease it was bound to (%x), and no process holds it now; nothing was applied", kv.ErrUnavailable, tok.Name, tok.Lease)
			}
			continue
		}
		if l := rr.Kvs[0].Lease; l != tok.Lease {
			return fmt.Errorf("%w: %s is owned under lease %x now, not this process's %x; nothing was applied", kv.ErrFenced, tok.Name, l, tok.Lease)
		}
	}
	return gone
}

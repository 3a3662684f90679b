package cowfs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
)

// Deleting blocks with several servers (docs/design.md). The sweep
// tracker orders the writers and the sweep of one process only; when
// several servers share a store (Options.Leases), a handshake in the
// store orders them all:
//
//   - A writer, before it relies on content h (asks whether it exists,
//     uploads it, stores it), commits intent/h/<writer> bound to its
//     server's lease and sets record/h to a value never used before, if
//     no deleting/h exists (else it waits for the deletion to finish).
//     The transaction that references h checks that the intent still
//     exists and deletes it; one whose intent is gone (its lease was
//     lost) fails, and the write starts over.
//   - A sweep marks the references, the records and the intents in a
//     snapshot at revision R. A hash no live layer references, with no
//     intent at R, is deleted only after a transaction that checks
//     record/h holds what it held at R, that no intent/h/ exists and no
//     deleting/h, puts deleting/h (bound to the sweep's lease) and
//     deletes record/h; then the content goes, then deleting/h.
//
// A writer whose intent came after R changed record/h; one whose intent
// was there at R is skipped; one that referenced h before R is seen by
// the mark; one whose intent is still there fails the sweep's
// transaction; one that starts after it waits for deleting/h to go.
//
// Keys (prefix 'X', owned by cowfs):
//
//	'X' 'r' hash(32)                  record: the value of the last intent's bump
//	'X' 'i' hash(32) writer(8) seq(8) intent, bound to the writer's lease
//	'X' 'd' hash(32)                  deleting, bound to the sweeper's lease
const (
	pfxCross   = 'X'
	kindRecord = 'r'
	kindIntent = 'i'
	kindDelete = 'd'
)

func crossKey(kind byte, h []byte) []byte { return append([]byte{pfxCross, kind}, h...) }

// sweepDeleteTimeout bounds each deletion a sweep sends to the content
// store with several servers; a sweep sends one only while its lease
// has more than this left (the residual risk: a deletion that arrives
// after the lease, and with it deleting/h, is gone).
const sweepDeleteTimeout = 10 * time.Second

// markerWait bounds how long a writer waits for a sweep's deletion of
// content it needs: longer than a lease (a dead sweeper's marks go with
// it) and a delayed marker removal.
var markerWait = 2 * time.Minute

// crossSweep is the handshake's state of one Store.
type crossSweep struct {
	leased kv.Leased
	writer [8]byte // random: names this process's intents and record values
	seq    atomic.Uint64
}

func newCrossSweep(l kv.Leased) *crossSweep {
	if l == nil {
		return nil
	}
	x := &crossSweep{leased: l}
	rand.Read(x.writer[:])
	return x
}

// token returns a value never used before by any process: the writer
// and a sequence number.
func (x *crossSweep) token() []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), x.writer[:]...), x.seq.Add(1))
}

// intents are the intent keys one attempt of a reference transaction
// took.
type intents struct {
	mu   sync.Mutex // protects keys; a leaf
	keys [][]byte
}

func (in *intents) add(keys [][]byte) {
	in.mu.Lock()
	in.keys = append(in.keys, keys...)
	in.mu.Unlock()
}

// intentTxn is the transaction updateContent hands a reference
// transaction's callback with several servers: the kv transaction and the
// intents its attempt took.
type intentTxn struct {
	kv.Txn
	in *intents
}

// intentsOf returns the intents of the attempt tx belongs to (tx, or a
// transaction wrapping it, from updateContent), nil if none.
func intentsOf(tx kv.Txn) *intents {
	for {
		switch t := tx.(type) {
		case intentTxn:
			return t.in
		case interface{ inner() kv.Txn }:
			tx = t.inner()
		default:
			return nil
		}
	}
}

// updateContent runs fn in a read-write transaction, which references
// content it stores. Without Options.Leases it is kv.Store.Update; with
// it, fn's attempt takes intents for the content it relies on (intend),
// and the transaction deletes them and commits only if they all still
// exist (kv.CommitChecker). An attempt whose intents went with a lost
// lease fails as a conflict does, and the next attempt takes new ones
// (under a new lease) and uploads again what is gone.
func (s *Store) updateContent(ctx context.Context, fn func(tx kv.Txn) error) error {
	if s.xs == nil {
		return s.kv.Update(ctx, fn)
	}
	var taken [][]byte // every intent taken, to delete those left behind
	var in *intents
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		if in != nil {
			taken = append(taken, in.keys...) // an earlier attempt's
		}
		in = &intents{}
		if err := fn(intentTxn{tx, in}); err != nil {
			return err
		}
		if len(in.keys) == 0 {
			return nil
		}
		cc, ok := tx.(kv.CommitChecker)
		if !ok {
			return fmt.Errorf("cowfs: Options.Leases needs a kv.Store whose transactions implement kv.CommitChecker (etcdkv's do), not %T", tx)
		}
		for _, k := range in.keys {
			if err := cc.RequireExists(k); err != nil {
				return err
			}
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if in != nil && err != nil {
		taken = append(taken, in.keys...)
	}
	if len(taken) > 0 {
		s.xs.dropIntents(s, taken)
	}
	return err
}

// dropIntents deletes intents no transaction consumed (of attempts that
// failed or were retried), so they stop keeping their content from the
// sweep. Best effort: what it leaves goes with the server's lease.
func (x *crossSweep) dropIntents(s *Store, keys [][]byte) {
	ctx, cancel := context.WithTimeout(context.Background(), sweepDeleteTimeout)
	defer cancel()
	n := deleteBatch(s.kv, 2+32+16)
	for i := 0; i < len(keys); i += n {
		batch := keys[i:min(i+n, len(keys))]
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			for _, k := range batch {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			s.opts.Logger.Warn("cowfs: deleting upload intents left by failed writes; they go with the server's lease", "err", err)
			return
		}
	}
}

// intend takes an intent for each content hash of hs in the attempt of
// tx (from updateContent), before the caller relies on that content. A
// hash a sweep is deleting is waited for. Without Options.Leases it does
// nothing.
func (s *Store) intend(ctx context.Context, tx kv.Txn, hs ...[]byte) error {
	if s.xs == nil {
		return nil
	}
	in := intentsOf(tx)
	if in == nil {
		return errors.New("cowfs: internal error: content stored outside updateContent")
	}
	seen := make(map[string]bool, len(hs))
	var uniq [][]byte
	for _, h := range hs {
		if !seen[string(h)] {
			seen[string(h)] = true
			uniq = append(uniq, h)
		}
	}
	lim := s.kv.Limits()
	// Each hash: a condition, two writes (of a key of 50 bytes, a value
	// of 16).
	n := max(1, min(lim.Reads, lim.Batch(2, 2*(50+16+lim.OpBytes))))
	for i := 0; i < len(uniq); i += n {
		batch := uniq[i:min(i+n, len(uniq))]
		conds := make([]kv.Cond, 0, len(batch))
		ops := make([]kv.Op, 0, 2*len(batch))
		keys := make([][]byte, 0, len(batch))
		for _, h := range batch {
			tok := s.xs.token()
			k := append(crossKey(kindIntent, h), tok...)
			keys = append(keys, k)
			conds = append(conds, kv.Cond{Key: crossKey(kindDelete, h), Absent: true})
			ops = append(ops, kv.Op{Key: k, Value: []byte{}, Leased: true},
				kv.Op{Key: crossKey(kindRecord, h), Value: tok})
		}
		wait, start := 5*time.Millisecond, time.Now()
		for {
			_, ok, err := s.xs.leased.CommitLeased(ctx, conds, ops)
			if err != nil {
				if errors.Is(err, kv.ErrUnknownOutcome) {
					in.add(keys) // may exist: deleted after the transaction
				}
				return fmt.Errorf("cowfs: taking upload intents: %w; nothing was written", err)
			}
			if ok {
				in.add(keys)
				break
			}
			// A sweep is deleting one of them: it takes a request to
			// the content store, or the sweep's lease to expire.
			if time.Since(start) >= markerWait {
				return fmt.Errorf("cowfs: a sweep has held block content marked for deletion for %v; its server may be stuck (its mark goes when its etcd lease ends, or when an operator revokes that lease); nothing was written", markerWait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, 500*time.Millisecond)
		}
	}
	return nil
}

// runLeased is Run with several servers: the handshake decides, hash by
// hash, what may go; the sweep tracker's lock is not taken.
func (w *Sweep) runLeased(ctx context.Context, marked map[[32]byte]struct{}) (int, error) {
	s, x := w.s, w.s.xs
	recs := map[[32]byte][]byte{}
	err := w.snap.Iterate([]byte{pfxCross, kindRecord}, nil, false, func(k, v []byte) (bool, error) {
		if len(k) == 34 {
			recs[[32]byte(k[2:])] = append([]byte(nil), v...)
		}
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	busy := map[[32]byte]bool{}
	err = w.snap.Iterate([]byte{pfxCross, kindIntent}, nil, true, func(k, _ []byte) (bool, error) {
		if len(k) >= 34 {
			busy[[32]byte(k[2:34])] = true
		}
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	cand := map[[32]byte]bool{}
	err = s.listContent(ctx, w.snap, func(h []byte) error {
		if _, ok := marked[[32]byte(h)]; !ok && !busy[[32]byte(h)] {
			cand[[32]byte(h)] = true
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for h := range recs {
		if _, ok := marked[h]; !ok && !busy[h] {
			cand[h] = true // a record whose content may never have been stored
		}
	}
	cands := make([][32]byte, 0, len(cand))
	for h := range cand {
		cands = append(cands, h)
	}
	slices.SortFunc(cands, func(a, b [32]byte) int { return slices.Compare(a[:], b[:]) })
	lim := s.kv.Limits()
	// Each hash: three conditions, two writes.
	size := max(1, min(blobSweepBatch, lim.Reads/3, lim.Batch(2, 2*(34+16+lim.OpBytes))))
	n := 0
	for i := 0; i < len(cands); i += size {
		batch := cands[i:min(i+size, len(cands))]
		lease, claimed, tok, err := x.claim(ctx, batch, recs)
		if err != nil {
			return n, errors.Join(err, x.unmark(claimed, tok)) // nothing deleted
		}
		n += len(batch)
		if len(claimed) == 0 {
			continue
		}
		sent, maybe, derr := x.deleteClaimed(ctx, s, lease, claimed)
		// The markers go whatever happened: content not deleted is still
		// unrecorded and unreferenced, a candidate for the next sweep.
		// The marker of a deletion that failed goes only once the
		// request can no longer arrive (it may have been sent), a
		// deletion's timeout later.
		if !maybe {
			sent = len(claimed)
		}
		uerr := x.unmark(claimed[:sent], tok)
		if rest := claimed[sent:]; len(rest) > 0 {
			uerr = errors.Join(uerr, x.unmark(rest[1:], tok))
			time.AfterFunc(sweepDeleteTimeout, func() {
				if err := x.unmark(rest[:1], tok); err != nil {
					s.opts.Logger.Warn("cowfs: sweep: a deletion marker stays until the server's lease ends; writers of that content fail meanwhile", "err", err)
				}
			})
		}
		if derr != nil {
			return n, derr
		}
		if uerr != nil {
			return n, uerr
		}
	}
	return n, nil
}

// claim commits, for each hash of batch that may go, deleting/h (bound to
// the lease, holding tok) and the deletion of record/h: in one
// transaction if all may, else one per hash. It returns the lease and
// the hashes claimed.
func (x *crossSweep) claim(ctx context.Context, batch [][32]byte, recs map[[32]byte][]byte) (int64, [][32]byte, []byte, error) {
	tok := x.token()
	build := func(hs [][32]byte) ([]kv.Cond, []kv.Op) {
		var conds []kv.Cond
		var ops []kv.Op
		for _, h := range hs {
			rc := kv.Cond{Key: crossKey(kindRecord, h[:]), Absent: true}
			if v, ok := recs[h]; ok {
				rc = kv.Cond{Key: rc.Key, Value: v}
			}
			conds = append(conds, rc,
				kv.Cond{Key: crossKey(kindIntent, h[:]), Prefix: true, Absent: true},
				kv.Cond{Key: crossKey(kindDelete, h[:]), Absent: true})
			ops = append(ops, kv.Op{Key: crossKey(kindDelete, h[:]), Value: tok, Leased: true},
				kv.Op{Key: crossKey(kindRecord, h[:]), Delete: true})
		}
		return conds, ops
	}
	conds, ops := build(batch)
	lease, ok, err := x.leased.CommitLeased(ctx, conds, ops)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cowfs: sweep: marking content for deletion: %w", err)
	}
	if ok {
		return lease, batch, tok, nil
	}
	if len(batch) == 1 {
		return lease, nil, tok, nil
	}
	// One of them was referenced or relied on since the mark: find
	// which, one by one. Every claim must be under the same lease, which
	// the deletions check.
	var claimed [][32]byte
	var first int64
	for _, h := range batch {
		conds, ops := build([][32]byte{h})
		l, ok, err := x.leased.CommitLeased(ctx, conds, ops)
		if err != nil {
			return first, claimed, tok, fmt.Errorf("cowfs: sweep: marking content for deletion: %w", err)
		}
		if !ok {
			continue
		}
		if len(claimed) > 0 && l != first {
			// The lease was lost meanwhile: the earlier markers are
			// gone. Stop here; the next sweep finds the rest.
			return first, claimed, tok, fmt.Errorf("cowfs: sweep: the server's lease was lost while marking content for deletion: %w", kv.ErrLeaseLost)
		}
		first = l
		claimed = append(claimed, h)
	}
	return first, claimed, tok, nil
}

// deleteClaimed deletes the content of hs, claimed under lease, while the
// lease has more than sweepDeleteTimeout left: a deletion sent later could
// arrive after deleting/h went with the lease and a writer uploaded h
// again.
//
// It returns how many of hs it deleted (in order), and whether the
// deletion of hs[done] failed after it may have been sent (it may still
// be applied); none was sent for the rest.
func (x *crossSweep) deleteClaimed(ctx context.Context, s *Store, lease int64, hs [][32]byte) (done int, maybe bool, err error) {
	deadline, err := x.leased.LeaseDeadline(ctx, lease)
	if err != nil {
		return 0, false, fmt.Errorf("cowfs: sweep: before deleting content: %w", err)
	}
	for i, h := range hs {
		if time.Until(deadline) <= sweepDeleteTimeout {
			return i, false, fmt.Errorf("cowfs: sweep: the server's lease has %v left, not more than a deletion may take (%v): stopping; the rest is deleted by the next sweep (check the etcd cluster's latency): %w",
				time.Until(deadline).Round(time.Millisecond), sweepDeleteTimeout, kv.ErrLeaseLost)
		}
		dctx, cancel := context.WithTimeout(ctx, sweepDeleteTimeout)
		if s.blobs != nil {
			err = s.blobs.Delete(dctx, blobs.Key(h))
		} else {
			err = s.kv.Update(dctx, func(tx kv.Txn) error { return tx.Delete(contentKey(h[:])) })
		}
		cancel()
		if err != nil && !errors.Is(err, blobs.ErrNotFound) {
			return i, true, fmt.Errorf("cowfs: sweep: deleting unreferenced content: %w", err)
		}
	}
	return len(hs), false, nil
}

// unmark deletes the deleting/h markers of hs that still hold tok. It
// does not take the sweep's context: a marker left behind makes writers
// of its content wait until the lease ends.
func (x *crossSweep) unmark(hs [][32]byte, tok []byte) error {
	if len(hs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*sweepDeleteTimeout)
	defer cancel()
	var conds []kv.Cond
	var ops []kv.Op
	for _, h := range hs {
		conds = append(conds, kv.Cond{Key: crossKey(kindDelete, h[:]), Value: tok})
		ops = append(ops, kv.Op{Key: crossKey(kindDelete, h[:]), Delete: true})
	}
	_, ok, err := x.leased.CommitLeased(ctx, conds, ops)
	if err != nil || ok || len(hs) == 1 {
		if err != nil {
			return fmt.Errorf("cowfs: sweep: removing deletion markers (they go with the lease): %w", err)
		}
		return nil
	}
	// Some went with a lost lease (and may be another sweep's now).
	for i := range hs {
		if _, _, err := x.leased.CommitLeased(ctx, conds[i:i+1], ops[i:i+1]); err != nil {
			return fmt.Errorf("cowfs: sweep: removing deletion markers (they go with the lease): %w", err)
		}
	}
	return nil
}

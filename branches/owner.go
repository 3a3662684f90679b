package branches

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/branchnfs/branchnfs/kv"
)

// Ownership, for a store shared by several servers (Options.Leases). A
// live branch is written through one server at a time, its owner: the
// server that forked it or took it over. Ownership is a key 'O' id(8)
// bound to the owner's lease (etcdkv.Coord): it goes when the owner
// stops renewing the lease (the process died, or lost the cluster for a
// TTL). Only the owner writes a branch's files (other servers serve it
// read-only: EROFS), checkpoints, restores or commits it; a server
// commits a branch it owns into a parent it owns, or into main. main is
// owned by no server: with several servers it changes only through
// commits, so any server may freeze its top for a fork. A fork from a
// branch another server owns takes the branch's last frozen state when
// its top holds no writes, and is refused otherwise (the owner's writes
// would land in a layer the fork froze). Takeover claims a branch whose
// owner is gone; Abort does too.

// Lease is a lease that binds keys to this server: etcdkv.Lease
// implements it.
type Lease interface {
	ID() int64
	// Claim sets key=value bound to the lease unless another lease holds
	// key; holder is the other's value.
	Claim(ctx context.Context, key, value []byte) (ok bool, holder []byte, err error)
	// Release deletes key if the lease holds it.
	Release(ctx context.Context, key []byte) (bool, error)
	// Done is closed when the lease is lost.
	Done() <-chan struct{}
}

// Leases grants and revokes leases: what etcdkv.Coord does, behind an
// adapter that returns its *etcdkv.Lease as a Lease.
type Leases interface {
	Grant(ctx context.Context, ttl time.Duration) (Lease, error)
	// Revoke ends lease id, whoever holds it: its keys go at once.
	Revoke(ctx context.Context, id int64) error
}

// ErrNotOwner: the branch is written through another server (or through
// none, until one takes it over).
var ErrNotOwner = errors.New("branches: not the branch's owner")

// NotOwnerError is an operation refused because this server does not own
// the branch. It matches ErrNotOwner.
type NotOwnerError struct {
	Branch string
	Owner  string // the owning server, "" when none owns it
	Server string // this server
	Op     string // what was refused
}

func (e *NotOwnerError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("%v: %s %q: no server owns it (its owner stopped and its lease expired); run `branchnfs takeover %s` on this server (%s) to write it here, or `branchnfs abort %s`",
			ErrNotOwner, e.Op, e.Branch, e.Branch, e.Server, e.Branch)
	}
	return fmt.Sprintf("%v: %s %q: it is written through server %s, not this one (%s): do it there; if that server is gone, its lease expires a TTL after it stopped and then `branchnfs takeover %s` here makes this server the owner",
		ErrNotOwner, e.Op, e.Branch, e.Owner, e.Server, e.Branch)
}

func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

func ownerKey(id BranchID) []byte { return binary.BigEndian.AppendUint64([]byte{'O'}, uint64(id)) }

// ownerRec is the value of an owner key.
type ownerRec struct {
	Server string `json:"server"`
	Lease  int64  `json:"lease"`
}

// owning reports whether branches have owners: several servers may share
// the store (Options.Leases).
func (m *Manager) owning() bool { return m.opts.Leases != nil }

// currentLease returns the lease this Manager owns branches with.
func (m *Manager) currentLease() Lease {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.lease
}

// setOwnedLocked records whether this server owns b, and lets its view
// take writes accordingly (m.mu held). main takes none when the store is
// shared.
func (m *Manager) setOwnedLocked(b *branch, owned bool) {
	b.owned = owned
	if b.fs == nil || !m.owning() {
		return
	}
	f := b.fs.Fence()
	if owned && b.rec.Parent != 0 && m.lease != nil {
		f.Hold(m.fenceToken(b))
		b.fs.SetReadOnly(false)
		return
	}
	b.fs.SetReadOnly(true)
	f.Drop()
}

// suspendOwnedLocked stops this server's writes to b, which it owned
// under a lease it lost, until it claims b again under a new one (m.mu
// held): writes answer EAGAIN (NFS3ERR_JUKEBOX) meanwhile, not EROFS,
// since the ownership may come back; reclaimOwned then arms the fence
// again or drops it.
func (m *Manager) suspendOwnedLocked(b *branch) {
	b.owned = false
	if b.fs == nil || !m.owning() {
		return
	}
	b.fs.Fence().Suspend()
	b.fs.SetReadOnly(true)
}

// fenceToken is the fencing token of b's writes by this server: its
// owner key bound to this server's lease (m.mu held, m.lease set). Every
// transaction that writes b's data or record on this server compares it
// in its commit (kv.Fence), so a server paused past its lease writes
// nothing once another took b over, whatever it still believes.
func (m *Manager) fenceToken(b *branch) kv.FenceToken {
	return kv.FenceToken{Key: ownerKey(b.rec.ID), Lease: m.lease.ID(), Name: fmt.Sprintf("branch %q", b.rec.Name)}
}

// fenced returns ctx carrying the fences of the branches of bs other
// than main (which no server owns), so that a lifecycle operation's
// transactions commit only while this server owns them (kv.Fence). On a
// store of its own it returns ctx.
func (m *Manager) fenced(ctx context.Context, bs ...*branch) context.Context {
	if !m.owning() {
		return ctx
	}
	for _, b := range bs {
		if b.rec.Parent != 0 && b.fs != nil {
			ctx = kv.WithFence(ctx, b.fs.Fence())
		}
	}
	return ctx
}

// owns reports whether this server may write b's files and move its top:
// always on a store of its own; on a shared one if it owns b, or b is
// main (which only lifecycle transactions change).
func (m *Manager) owns(b *branch) bool {
	if !m.owning() {
		return true
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return b.owned || b.rec.Parent == 0
}

// ownedOnly is owns without the exception for main.
func (m *Manager) ownedOnly(b *branch) bool {
	if !m.owning() {
		return true
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return b.owned
}

// notOwner builds the error for op on b, naming its owner as stored.
func (m *Manager) notOwner(ctx context.Context, b *branch, op string) error {
	e := &NotOwnerError{Branch: b.rec.Name, Server: m.opts.Server, Op: op}
	if o, err := m.ownerOf(ctx, b.rec.ID); err == nil {
		e.Owner = o.Server
	}
	return e
}

// ownerOf reads the owner key of id; a zero ownerRec when none.
func (m *Manager) ownerOf(ctx context.Context, id BranchID) (ownerRec, error) {
	var o ownerRec
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(ownerKey(id))
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return json.Unmarshal(v, &o)
	})
	return o, err
}

// claim makes this server the owner of id unless another server is: ok
// false and the holder then.
func (m *Manager) claim(ctx context.Context, id BranchID) (ok bool, holder ownerRec, err error) {
	l := m.currentLease()
	if l == nil {
		return false, holder, errors.New("branches: this server holds no lease on the cluster (lost, and not granted again yet): retry")
	}
	v, _ := json.Marshal(ownerRec{Server: m.opts.Server, Lease: l.ID()})
	ok, h, err := l.Claim(ctx, ownerKey(id), v)
	if err != nil {
		name := fmt.Sprintf("id %d", id)
		m.mu.RLock()
		if b := m.byID[id]; b != nil {
			name = fmt.Sprintf("%q", b.rec.Name)
		}
		m.mu.RUnlock()
		return false, holder, fmt.Errorf("branches: claiming branch %s for this server: %w", name, err)
	}
	if ok {
		return ok, holder, nil
	}
	json.Unmarshal(h, &holder)
	return false, holder, nil
}

// release gives up the ownership of id (its branch ended), if held.
func (m *Manager) release(ctx context.Context, id BranchID) {
	if l := m.currentLease(); l != nil {
		if _, err := l.Release(ctx, ownerKey(id)); err != nil {
			m.opts.Logger.Warn("branches: releasing a branch's owner key (it goes with the lease anyway)", "id", id, "err", err)
		}
	}
}

// startOwnership grants this Manager's lease and takes back the
// branches a previous process of the same server owned (Open). The
// caller holds nothing.
func (m *Manager) startOwnership(ctx context.Context) error {
	l, err := m.opts.Leases.Grant(ctx, m.opts.LeaseTTL)
	if err != nil {
		return fmt.Errorf("branches: open: a lease on the cluster for branch ownership: %w", err)
	}
	m.mu.Lock()
	m.lease = l
	for _, b := range m.byID {
		m.setOwnedLocked(b, false)
	}
	m.mu.Unlock()
	m.reclaimOwned(ctx, nil)
	return nil
}

// reclaimOwned claims again the branches whose owner key names this
// server under another lease (an earlier process of it, gone: the store
// lock says so, or this process before it lost its lease), revoking that
// lease, and those of ids (owned before a lost lease) that no server owns
// now.
func (m *Manager) reclaimOwned(ctx context.Context, ids []BranchID) (failed []BranchID) {
	l := m.currentLease()
	olds := map[int64]bool{}
	var mine []BranchID
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		clear(olds)
		mine = mine[:0]
		return tx.Iterate([]byte{'O'}, nil, false, func(k, v []byte) (bool, error) {
			var o ownerRec
			if len(k) != 9 || json.Unmarshal(v, &o) != nil {
				return true, nil
			}
			if o.Server == m.opts.Server && o.Lease != l.ID() {
				olds[o.Lease] = true
				mine = append(mine, BranchID(binary.BigEndian.Uint64(k[1:])))
			}
			return true, nil
		})
	})
	if err != nil {
		m.opts.Logger.Warn("branches: reading the owners of branches", "err", err)
		return ids
	}
	// And the live branches it forked or took over last, which no other
	// server took since (their keys went with an older lease).
	m.mu.RLock()
	for id, b := range m.byID {
		if b.rec.Owner == m.opts.Server && b.rec.State == StateLive {
			mine = append(mine, id)
		}
	}
	m.mu.RUnlock()
	for id := range olds {
		if err := m.opts.Leases.Revoke(ctx, id); err != nil {
			m.opts.Logger.Warn("branches: revoking the lease of an earlier process of this server", "lease", id, "err", err)
		}
	}
	// A branch another server took over meanwhile is its, whether or not
	// its owner key is still there (that server may have lost its own
	// lease since, and claims it again): the stored record names the
	// server that took it over (takeover writes it once it claimed), and
	// this server's copy may not have caught up with it yet.
	cands := append(mine, ids...)
	takenBy, err := m.storedOwners(ctx, cands)
	if err != nil {
		m.opts.Logger.Warn("branches: reading the records of branches this server owned", "err", err)
		return ids
	}
	for _, id := range cands {
		m.mu.RLock()
		b := m.byID[id]
		m.mu.RUnlock()
		if b == nil || b.rec.State != StateLive {
			continue
		}
		if o := takenBy[id]; o != "" && o != m.opts.Server {
			m.mu.Lock()
			m.setOwnedLocked(b, false)
			m.mu.Unlock()
			continue
		}
		ok, _, err := m.claim(ctx, id)
		if err != nil {
			m.opts.Logger.Warn("branches: claiming a branch this server owned", "branch", b.rec.Name, "err", err)
			failed = append(failed, id)
			continue
		}
		m.mu.Lock()
		m.setOwnedLocked(b, ok)
		m.mu.Unlock()
	}
	return failed
}

// storedOwners reads the owner named in the stored record of each of
// ids ("" for a record that names none, or is gone).
func (m *Manager) storedOwners(ctx context.Context, ids []BranchID) (map[BranchID]string, error) {
	owners := make(map[BranchID]string, len(ids))
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		clear(owners)
		for _, id := range ids {
			v, err := tx.Get(branchKey(id))
			if errors.Is(err, kv.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("branches: corrupt record of branch id %d: %w", id, err)
			}
			owners[id] = r.Owner
		}
		return nil
	})
	return owners, err
}

// leaseLoop waits for the loss of the lease: this server then stops
// writing its branches, grants a new lease, and claims again those no
// server took meanwhile.
func (m *Manager) leaseLoop(ctx context.Context) {
	defer m.wg.Done()
	for {
		l := m.currentLease()
		select {
		case <-ctx.Done():
			return
		case <-l.Done():
		}
		var had []BranchID
		m.mu.Lock()
		m.lease = nil
		for id, b := range m.byID {
			if b.owned {
				had = append(had, id)
				m.suspendOwnedLocked(b)
			}
		}
		m.mu.Unlock()
		m.opts.Logger.Error("branches: this server's lease on the cluster was lost (revoked, or not renewed for its TTL while the cluster was out of reach): writes to its branches answer 'try again later' until it gets a new lease and claims them again", "branches", len(had))
		warn := newLogEvery(10 * time.Second)
		for ctx.Err() == nil {
			nl, err := m.opts.Leases.Grant(ctx, m.opts.LeaseTTL)
			if err == nil {
				m.mu.Lock()
				m.lease = nl
				m.mu.Unlock()
				break
			}
			if warn.ok() {
				m.opts.Logger.Warn("branches: granting a new lease (retrying every second)", "err", err)
			}
			sleepCtx(ctx, time.Second)
		}
		if ctx.Err() != nil {
			return
		}
		// Claim them again; a claim the cluster did not answer is tried
		// again for a while, then the branch stays read-only here.
		left := m.reclaimOwned(ctx, had)
		for try := 0; len(left) > 0 && try < reclaimTries && ctx.Err() == nil; try++ {
			sleepCtx(ctx, time.Second)
			left = m.reclaimOwned(ctx, left)
		}
		m.mu.Lock()
		for _, id := range left {
			if b := m.byID[id]; b != nil && !b.owned {
				m.setOwnedLocked(b, false)
			}
		}
		m.mu.Unlock()
	}
}

// reclaimTries bounds how often leaseLoop claims again, a second apart,
// the branches whose claims the cluster did not answer.
const reclaimTries = 30

// logEvery lets a repeated warning through once per interval.
type logEvery struct {
	every time.Duration
	last  time.Time
}

func newLogEvery(every time.Duration) *logEvery { return &logEvery{every: every} }

// ok reports whether to log now. One goroutine uses it.
func (l *logEvery) ok() bool {
	if now := time.Now(); now.Sub(l.last) >= l.every {
		l.last = now
		return true
	}
	return false
}

// Takeover makes this server the owner of branch name, live or
// invalidated, when no server owns it (its owner stopped and its lease
// expired), or this one does already. Otherwise it fails with a
// *NotOwnerError naming the owner.
func (m *Manager) Takeover(ctx context.Context, name string) (Info, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.RLock()
	b, ok := m.byName[name]
	m.mu.RUnlock()
	if !ok {
		if err := CheckName(name); err != nil {
			return Info{}, err
		}
		return Info{}, fmt.Errorf("%w: branch %q", ErrNotFound, name)
	}
	if b.rec.Parent == 0 {
		return Info{}, fmt.Errorf("%w: %q is owned by no server: it changes only through commits", ErrReadOnly, name)
	}
	if !m.owning() {
		return m.fullInfo(ctx, b)
	}
	if err := m.takeover(ctx, b, "take over"); err != nil {
		return Info{}, err
	}
	return m.fullInfo(ctx, b)
}

// takeover claims b for this server (opMu held).
func (m *Manager) takeover(ctx context.Context, b *branch, op string) error {
	if m.ownedOnly(b) {
		return nil
	}
	ok, holder, err := m.claim(ctx, b.rec.ID)
	if err != nil {
		return fmt.Errorf("branches: %s %s: %w", op, b.rec.Name, err)
	}
	if !ok {
		return &NotOwnerError{Branch: b.rec.Name, Owner: holder.Server, Server: m.opts.Server, Op: op}
	}
	// The record names the new owner, which claims it again after a
	// restart.
	rec := b.rec
	rec.Owner = m.opts.Server
	err = m.cow.KV().Update(ctx, func(tx kv.Txn) error {
		if err := checkStored(tx, b.rec); err != nil {
			return err
		}
		v, err := tx.Get(branchKey(rec.ID))
		if err != nil {
			return err
		}
		var stored record
		if err := json.Unmarshal(v, &stored); err != nil {
			return fmt.Errorf("branches: corrupt record of %q: %w", rec.Name, err)
		}
		stored.Owner = rec.Owner
		return putRecord(tx, stored)
	})
	if err != nil {
		m.release(ctx, b.rec.ID)
		return fmt.Errorf("branches: %s %s: %w", op, b.rec.Name, mapErr(err))
	}
	m.mu.Lock()
	b.rec = rec
	m.setOwnedLocked(b, true)
	m.mu.Unlock()
	return nil
}

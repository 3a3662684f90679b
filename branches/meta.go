package branches

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/branchnfs/branchnfs/kv"
)

// Meta is what runners of attempts keep on a live branch: labels, a score
// and a lease. JSON field names are part of the API.
//
// Stored under 'A' id(8) as JSON; a branch without labels, score or lease
// has no key. Keys of branches that are no longer live are deleted by
// ExpireLeases.
type Meta struct {
	Labels map[string]string `json:"labels,omitempty"`
	Score  *float64          `json:"score,omitempty"`
	// LeaseExpires: when it passes, ExpireLeases aborts the branch (and so
	// fences it); whoever supervises its processes then kills them.
	LeaseExpires *time.Time `json:"lease_expires,omitempty"`
}

func (m Meta) empty() bool { return len(m.Labels) == 0 && m.Score == nil && m.LeaseExpires == nil }

// MetaUpdate changes a branch's Meta. Zero fields change nothing.
type MetaUpdate struct {
	// Labels are set; a label with an empty value is removed.
	Labels map[string]string `json:"labels,omitempty"`
	Score  *float64          `json:"score,omitempty"`
	// ClearScore removes the score.
	ClearScore bool `json:"clear_score,omitempty"`
	// LeaseMS > 0 sets the lease to expire that many milliseconds from now;
	// < 0 removes it.
	LeaseMS int64 `json:"lease_ms,omitempty"`
}

func metaKey(id BranchID) []byte { return binary.BigEndian.AppendUint64([]byte{'A'}, uint64(id)) }

var metaPrefix = []byte{'A'}

// CheckLabel validates a label key: the characters of a name, 1-64.
func CheckLabel(k string) error {
	if !nameRE.MatchString(k) {
		return fmt.Errorf("%w: label %q (want 1-64 of A-Z a-z 0-9 . _ -)", ErrInvalidName, k)
	}
	return nil
}

// SetMeta applies u to the Meta of live branch name and returns the result.
func (m *Manager) SetMeta(ctx context.Context, name string, u MetaUpdate) (Meta, error) {
	for k, v := range u.Labels {
		if err := CheckLabel(k); err != nil {
			return Meta{}, err
		}
		if len(v) > 256 {
			return Meta{}, fmt.Errorf("%w: the value of label %q is %d bytes, more than 256", ErrInvalidName, k, len(v))
		}
	}
	// Not under opMu: a lease renewal must not wait behind a long merge
	// or diff, or the lease would expire meanwhile. Meta keys are touched
	// by no lifecycle operation; the Meta of a branch that ends meanwhile
	// is deleted by the next ExpireLeases.
	b, err := m.live(name)
	if err != nil {
		return Meta{}, err
	}
	if u.LeaseMS > 0 && b.rec.Parent == 0 {
		return Meta{}, fmt.Errorf("%w: %q is the root branch: it cannot be aborted, so it takes no lease", ErrReadOnly, name)
	}
	var out Meta
	err = m.cow.KV().Update(ctx, func(tx kv.Txn) error {
		var md Meta
		if err := getMeta(tx, b.rec.ID, &md); err != nil {
			return err
		}
		for k, v := range u.Labels {
			if md.Labels == nil {
				md.Labels = map[string]string{}
			}
			if v == "" {
				delete(md.Labels, k)
			} else {
				md.Labels[k] = v
			}
		}
		if u.ClearScore {
			md.Score = nil
		}
		if u.Score != nil {
			s := *u.Score
			md.Score = &s
		}
		switch {
		case u.LeaseMS > 0:
			t := time.Now().UTC().Add(time.Duration(u.LeaseMS) * time.Millisecond)
			md.LeaseExpires = &t
		case u.LeaseMS < 0:
			md.LeaseExpires = nil
		}
		out = md
		if md.empty() {
			return tx.Delete(metaKey(b.rec.ID))
		}
		v, err := json.Marshal(md)
		if err != nil {
			return err
		}
		return tx.Set(metaKey(b.rec.ID), v)
	})
	if err != nil {
		return Meta{}, fmt.Errorf("branches: set meta of %s: %w", name, mapErr(err))
	}
	return out, nil
}

func getMeta(tx kv.Txn, id BranchID, md *Meta) error {
	v, err := tx.Get(metaKey(id))
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(v, md)
}

// Metas returns the Meta of every live branch that has one, by name.
func (m *Manager) Metas(ctx context.Context) (map[string]Meta, error) {
	out := map[string]Meta{}
	_, err := m.scanMeta(ctx, func(name string, md Meta) { out[name] = md })
	return out, err
}

// scanMeta calls fn for each live branch's Meta and returns the IDs of
// Meta keys whose branch is no longer live.
func (m *Manager) scanMeta(ctx context.Context, fn func(name string, md Meta)) ([]BranchID, error) {
	var dead []BranchID
	err := m.cow.KV().View(ctx, func(tx kv.Txn) error {
		return tx.Iterate(metaPrefix, nil, false, func(k, v []byte) (bool, error) {
			if len(k) != 9 {
				return true, nil
			}
			id := BranchID(binary.BigEndian.Uint64(k[1:]))
			m.mu.RLock()
			b := m.byID[id]
			live := b != nil && b.rec.State == StateLive
			var name string
			if live {
				name = b.rec.Name
			}
			m.mu.RUnlock()
			if !live {
				dead = append(dead, id)
				return true, nil
			}
			var md Meta
			if err := json.Unmarshal(v, &md); err != nil {
				return false, err
			}
			fn(name, md)
			return true, nil
		})
	})
	return dead, mapErr(err)
}

// ExpireLeases aborts every live branch whose lease expired before now
// (with its descendants), deletes the Meta of branches no longer live, and
// returns the names it aborted, sorted.
func (m *Manager) ExpireLeases(ctx context.Context, now time.Time) ([]string, error) {
	var expired []string
	dead, err := m.scanMeta(ctx, func(name string, md Meta) {
		if md.LeaseExpires != nil && md.LeaseExpires.Before(now) {
			expired = append(expired, name)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(dead) > 0 {
		err := m.cow.KV().Update(ctx, func(tx kv.Txn) error {
			for _, id := range dead {
				if err := tx.Delete(metaKey(id)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("branches: delete the meta of gone branches: %w", mapErr(err))
		}
	}
	sort.Strings(expired)
	var aborted []string
	var firstErr error
	for _, name := range expired {
		ok, err := m.expireLease(ctx, name, now)
		if err != nil {
			// One branch that cannot be aborted must not keep the others'
			// leases from expiring.
			m.opts.Logger.Warn("branches: lease expired but the branch could not be aborted", "branch", name, "err", err)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if ok {
			m.opts.Logger.Info("branches: lease expired: branch aborted", "branch", name)
			aborted = append(aborted, name)
		}
	}
	return aborted, firstErr
}

// expireLease aborts live branch name if, read again under opMu, its lease
// still expired before now: a renewal that landed since the scan wins.
func (m *Manager) expireLease(ctx context.Context, name string, now time.Time) (bool, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	b, err := m.live(name)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var md Meta
	if err := m.cow.KV().View(ctx, func(tx kv.Txn) error { return getMeta(tx, b.rec.ID, &md) }); err != nil {
		return false, mapErr(err)
	}
	if md.LeaseExpires == nil || !md.LeaseExpires.Before(now) {
		return false, nil
	}
	if _, err := m.abortLocked(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
		return false, err
	}
	return true, nil
}

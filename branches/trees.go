package branches

import (
	"context"
	"fmt"
	"io"
	"path"
	"sync"

	"github.com/branchnfs/branchnfs/branches/results"
	"github.com/branchnfs/branchnfs/cowfs"
)

// Trees are read-only trees of a branch (Head) and of the state its
// changes are measured against (Base: its fork base, or one of its
// checkpoints), with the paths a diff reports changed between them. They
// are what the results package reads to write a patch, a change set or
// a tar stream. Head is the live branch: writes to it while Trees are
// open show in it (export a checkpoint for a frozen state).
type Trees struct {
	Branch string
	Parent string
	Base   results.Tree // nil for main, which has no fork point
	Head   results.Tree
	// Paths are the changed paths, sorted, names on the ignore list left
	// out; Expand them into deltas.
	Paths []string
	// Ignore reports the paths the diff leaves out (the store's ignore
	// list and silly-renamed files), for results.ExpandOptions.
	Ignore func(p string) bool

	once    sync.Once
	release func()
}

// Close releases the trees; background reclamation and folding, which
// wait while any trees are open, go on.
func (t *Trees) Close() {
	t.once.Do(t.release)
}

// Trees opens branch name and its fork base read-only, or, when since is
// set, the branch and its checkpoint since (its changes since that
// checkpoint). The caller must Close them: until then, background
// reclamation, folding and GC wait (forks, commits, NFS and other trees
// go on).
// Errors: those of Diff; ErrNotFound for a missing checkpoint; an error
// for a checkpoint the branch was restored past.
func (m *Manager) Trees(ctx context.Context, name, since string) (*Trees, error) {
	m.gc.mu.RLock()
	t, err := m.trees(ctx, name, since)
	if err != nil {
		m.gc.mu.RUnlock()
		return nil, err
	}
	return t, nil
}

func (m *Manager) trees(ctx context.Context, name, since string) (*Trees, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	b, err := m.live(name)
	if err != nil {
		return nil, err
	}
	m.mu.RLock()
	in := m.infoLocked(b)
	rec := b.rec
	m.mu.RUnlock()
	stack := b.fs.Stack()
	ignore := func(p string) bool { return m.ignore(p) || cowfs.IsSillyName(path.Base(p)) }
	t := &Trees{Branch: name, Parent: in.Parent, Head: results.FromBilly(b.fs.Billy()), Ignore: ignore,
		release: func() { m.gc.mu.RUnlock() }}
	baseLayer := rec.Base
	if since != "" {
		cp, err := m.checkpoint(ctx, b, since)
		if err != nil {
			return nil, err
		}
		baseLayer = cp.Layer
	}
	if baseLayer == 0 {
		return t, nil // main has no fork point
	}
	_, bstack := splitAtBase(stack, baseLayer)
	if bstack == nil {
		if since != "" {
			return nil, fmt.Errorf("branches: checkpoint %q of %s is not below the branch's current state (it was restored to an earlier checkpoint since): pick a later checkpoint", since, name)
		}
		return nil, fmt.Errorf("branches: %s: fork point %d is not in the branch's stack", name, baseLayer)
	}
	changes, err := m.cow.Diff(ctx, stack, bstack, m.ignore)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		t.Paths = append(t.Paths, c.Path)
	}
	base := m.cow.View(bstack)
	t.Base = results.FromBilly(base.Billy())
	t.release = func() { base.Close(); m.gc.mu.RUnlock() }
	return t, nil
}

// Tree opens branch name read-only, or its checkpoint label when label is
// set (a frozen state). The caller must call the returned release; until
// then background reclamation, folding and GC wait.
func (m *Manager) Tree(ctx context.Context, name, label string) (results.Tree, func(), error) {
	m.gc.mu.RLock()
	t, release, err := m.tree(ctx, name, label)
	if err != nil {
		m.gc.mu.RUnlock()
		return nil, nil, err
	}
	var once sync.Once
	return t, func() { once.Do(func() { release(); m.gc.mu.RUnlock() }) }, nil
}

func (m *Manager) tree(ctx context.Context, name, label string) (results.Tree, func(), error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	b, err := m.live(name)
	if err != nil {
		return nil, nil, err
	}
	if label == "" {
		return results.FromBilly(b.fs.Billy()), func() {}, nil
	}
	cp, err := m.checkpoint(ctx, b, label)
	if err != nil {
		return nil, nil, err
	}
	stack, err := m.cow.Stack(ctx, cp.Layer)
	if err != nil {
		return nil, nil, fmt.Errorf("branches: checkpoint %q of %s: %w", label, name, mapErr(err))
	}
	v := m.cow.View(stack)
	return results.FromBilly(v.Billy()), func() { v.Close() }, nil
}

// Deltas expands the trees' paths into per-path deltas, hashing files.
func (t *Trees) Deltas() ([]results.Delta, error) {
	if t.Base == nil {
		return nil, nil
	}
	return results.Expand(t.Base, t.Head, t.Paths, results.ExpandOptions{Ignore: t.Ignore, Hash: true})
}

// Patch writes what branch name changed since its fork base (or its
// checkpoint since) to w as a git patch (see results.WritePatch).
func (m *Manager) Patch(ctx context.Context, name, since string, w io.Writer) (results.PatchStats, error) {
	t, err := m.Trees(ctx, name, since)
	if err != nil {
		return results.PatchStats{}, err
	}
	defer t.Close()
	deltas, err := t.Deltas()
	if err != nil {
		return results.PatchStats{}, fmt.Errorf("branches: patch of %s: %w", name, err)
	}
	if t.Base == nil {
		return results.PatchStats{}, nil
	}
	return results.WritePatch(w, t.Base, t.Head, deltas, results.PatchOptions{})
}

// ChangeSet writes what branch name changed since its fork base (or its
// checkpoint since) to w as a change set, with the new content of files
// when content is set (see results.WriteChangeSet). .git is included:
// the reader decides.
func (m *Manager) ChangeSet(ctx context.Context, name, since string, content bool, w io.Writer) error {
	t, err := m.Trees(ctx, name, since)
	if err != nil {
		return err
	}
	defer t.Close()
	deltas, err := t.Deltas()
	if err != nil {
		return fmt.Errorf("branches: changes of %s: %w", name, err)
	}
	return results.WriteChangeSet(w, t.Head, deltas, content)
}

// Export writes branch name, or its checkpoint label, to w as a tar
// stream (see results.WriteTar); sub, when set, limits it to that
// subtree.
func (m *Manager) Export(ctx context.Context, name, label, sub string, w io.Writer) (results.TarStats, error) {
	t, release, err := m.Tree(ctx, name, label)
	if err != nil {
		return results.TarStats{}, err
	}
	defer release()
	return results.WriteTar(w, t, results.TarOptions{Sub: sub, Ignore: func(n string) bool { return cowfs.IsSillyName(n) }})
}

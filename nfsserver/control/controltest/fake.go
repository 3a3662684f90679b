// Package controltest provides a fake control.Backend for tests of the
// control API and its clients.
package controltest

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/branchnfs/branchnfs/branches"
)

// Fake is a small in-memory model of the branch lifecycle, enough to
// exercise the API: names, fork, first-commit-wins, abort, checkpoints.
type Fake struct {
	Mu    sync.Mutex // protects the following
	infos map[string]*branches.Info
	cps   map[string]bool // branch/label
	next  branches.BranchID
	// Fail, when set, is returned by every call.
	Fail error
	// Panic, when set, makes every call panic.
	Panic bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func New() *Fake {
	return &Fake{
		infos: map[string]*branches.Info{"main": {ID: 1, Name: "main", State: branches.StateLive}},
		cps:   map[string]bool{},
		next:  2,
	}
}

func (f *Fake) check() error {
	if f.Panic {
		panic("fake backend exploded")
	}
	return f.Fail
}

func (f *Fake) live(name string) (*branches.Info, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("%w: %q", branches.ErrInvalidName, name)
	}
	in, ok := f.infos[name]
	if !ok {
		return nil, fmt.Errorf("%w: branch %q", branches.ErrNotFound, name)
	}
	switch in.State {
	case branches.StateInvalidated:
		return nil, &branches.InvalidatedError{Branch: name, By: in.InvalidatedBy}
	case branches.StateLive:
		return in, nil
	}
	return nil, fmt.Errorf("%w: branch %q is %s", branches.ErrStale, name, in.State)
}

func (f *Fake) Fork(ctx context.Context, parent, name string) (branches.Info, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return branches.Info{}, err
	}
	p, err := f.live(parent)
	if err != nil {
		return branches.Info{}, err
	}
	if !nameRE.MatchString(name) {
		return branches.Info{}, fmt.Errorf("%w: %q", branches.ErrInvalidName, name)
	}
	if in, ok := f.infos[name]; ok && in.State == branches.StateLive {
		return branches.Info{}, fmt.Errorf("%w: branch %q", branches.ErrExists, name)
	}
	in := &branches.Info{ID: f.next, Name: name, Parent: parent, ParentID: p.ID, State: branches.StateLive,
		ForkTime: time.Unix(1700000000, 0).UTC(), Depth: p.Depth + 1}
	f.next++
	f.infos[name] = in
	p.Children = append(p.Children, name)
	return *in, nil
}

func (f *Fake) ForkCheckpoint(ctx context.Context, parent, label, name string) (branches.Info, error) {
	f.Mu.Lock()
	ok := f.cps[parent+"/"+label]
	f.Mu.Unlock()
	if !ok {
		return branches.Info{}, fmt.Errorf("%w: checkpoint %q of %q", branches.ErrNotFound, label, parent)
	}
	in, err := f.Fork(ctx, parent, name)
	in.ForkedFrom = label
	return in, err
}

func (f *Fake) Commit(ctx context.Context, name string) (branches.CommitResult, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return branches.CommitResult{}, err
	}
	in, err := f.live(name)
	if err != nil {
		return branches.CommitResult{}, err
	}
	if in.Parent == "" {
		return branches.CommitResult{}, fmt.Errorf("%w: main cannot be committed", branches.ErrReadOnly)
	}
	if len(in.Children) > 0 {
		return branches.CommitResult{}, &branches.HasChildrenError{Branch: name, Children: in.Children}
	}
	p := f.infos[in.Parent]
	res := branches.CommitResult{Branch: name, Parent: in.Parent, FastPath: true}
	for _, c := range p.Children {
		if c != name {
			f.infos[c].State = branches.StateInvalidated
			f.infos[c].InvalidatedBy = "commit of " + name + " into " + in.Parent
			res.Invalidated = append(res.Invalidated, c)
		}
	}
	p.Children = nil
	in.State = branches.StateCommitted
	return res, nil
}

func (f *Fake) Abort(ctx context.Context, name string) (branches.AbortResult, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return branches.AbortResult{}, err
	}
	if _, err := f.live(name); err != nil {
		return branches.AbortResult{}, err
	}
	if name == "main" {
		return branches.AbortResult{}, fmt.Errorf("%w: main cannot be aborted", branches.ErrReadOnly)
	}
	f.infos[name].State = branches.StateAborted
	return branches.AbortResult{Aborted: []string{name}}, nil
}

func (f *Fake) Checkpoint(ctx context.Context, name, label string) (branches.Checkpoint, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return branches.Checkpoint{}, err
	}
	if _, err := f.live(name); err != nil {
		return branches.Checkpoint{}, err
	}
	if !nameRE.MatchString(label) {
		return branches.Checkpoint{}, fmt.Errorf("%w: label %q", branches.ErrInvalidName, label)
	}
	if f.cps[name+"/"+label] {
		return branches.Checkpoint{}, fmt.Errorf("%w: checkpoint %q", branches.ErrExists, label)
	}
	f.cps[name+"/"+label] = true
	return branches.Checkpoint{Branch: name, Label: label, Time: time.Unix(1700000000, 0).UTC()}, nil
}

func (f *Fake) Restore(ctx context.Context, name, label string) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	if _, err := f.live(name); err != nil {
		return err
	}
	if !f.cps[name+"/"+label] {
		return fmt.Errorf("%w: checkpoint %q", branches.ErrNotFound, label)
	}
	return nil
}

func (f *Fake) List(ctx context.Context) ([]branches.Info, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return nil, err
	}
	var out []branches.Info
	for _, in := range f.infos {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *Fake) Get(ctx context.Context, name string) (branches.Info, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return branches.Info{}, err
	}
	if !nameRE.MatchString(name) {
		return branches.Info{}, fmt.Errorf("%w: %q", branches.ErrInvalidName, name)
	}
	in, ok := f.infos[name]
	if !ok {
		return branches.Info{}, fmt.Errorf("%w: branch %q", branches.ErrNotFound, name)
	}
	return *in, nil
}

func (f *Fake) Diff(ctx context.Context, name string) (branches.Diff, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := f.check(); err != nil {
		return branches.Diff{}, err
	}
	in, err := f.live(name)
	if err != nil {
		return branches.Diff{}, err
	}
	return branches.Diff{Branch: name, Parent: in.Parent,
		Changes: []branches.Change{{Path: "a.txt", Kind: branches.Added, Type: "file", Bytes: 5}}}, nil
}

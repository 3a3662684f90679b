package kv

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrFenced is returned by Update when a fence of its context (WithFence)
// was dropped, or when the key the fence names is bound to another lease
// at commit: another process owns what the transaction writes, and
// nothing was applied. It is not retried.
var ErrFenced = errors.New("kv: fenced: another process owns what this transaction writes")

// FenceToken is what a fenced commit compares: Key must be bound to lease
// Lease when the transaction commits (the owner record of what it
// writes). Name names the owned thing in error messages.
type FenceToken struct {
	Key   []byte
	Lease int64
	Name  string
}

// Fence is a fencing token that its holder changes as its ownership
// changes: every read-write transaction run under a context carrying it
// (WithFence) commits only if, in the commit itself, the token's key is
// still bound to its lease. A process that believes it owns something
// but was paused past its lease cannot write then, whatever it believes.
// Stores that several processes share implement it (etcdkv: a compare on
// the key's lease in the commit's Txn); a store of one process ignores it.
//
// The zero Fence is unarmed: it checks nothing. Hold arms it, Suspend
// makes commits fail with ErrUnavailable (the holder is getting its
// lease back: try again later), Drop with ErrFenced. It is safe for
// concurrent use.
type Fence struct {
	st atomic.Pointer[fenceState]
}

type fenceState struct {
	tok  FenceToken
	mode fenceMode
}

type fenceMode int

const (
	fenceHeld fenceMode = iota + 1
	fenceSuspended
	fenceDropped
)

// Hold arms the fence with tok: commits from now on compare it.
func (f *Fence) Hold(tok FenceToken) {
	f.st.Store(&fenceState{tok: tok, mode: fenceHeld})
}

// Suspend refuses commits with an error wrapping ErrUnavailable until
// the next Hold or Drop: the holder lost its lease and may get the
// ownership back.
func (f *Fence) Suspend() { f.set(fenceSuspended) }

// Drop refuses commits with ErrFenced until the next Hold.
func (f *Fence) Drop() { f.set(fenceDropped) }

func (f *Fence) set(mode fenceMode) {
	var tok FenceToken
	if s := f.st.Load(); s != nil {
		tok = s.tok
	}
	f.st.Store(&fenceState{tok: tok, mode: mode})
}

// Suspended reports whether the fence is suspended (Suspend).
func (f *Fence) Suspended() bool {
	s := f.st.Load()
	return s != nil && s.mode == fenceSuspended
}

// Token returns the token a commit must compare now: ok is false for an
// unarmed fence (nothing to compare), and err is set when the fence
// refuses every commit (suspended or dropped).
func (f *Fence) Token() (tok FenceToken, ok bool, err error) {
	s := f.st.Load()
	if s == nil {
		return FenceToken{}, false, nil
	}
	switch s.mode {
	case fenceSuspended:
		return s.tok, false, fmt.Errorf("%w: %s is being claimed again under a new lease of this process (its lease was lost); try again shortly", ErrUnavailable, s.tok.Name)
	case fenceDropped:
		return s.tok, false, fmt.Errorf("%w: this process no longer owns %s", ErrFenced, s.tok.Name)
	}
	return s.tok, true, nil
}

type fenceKey struct{}

// WithFence returns ctx carrying f besides the fences ctx carries: a
// read-write transaction under it commits only while each holds.
func WithFence(ctx context.Context, f *Fence) context.Context {
	if f == nil {
		return ctx
	}
	old := Fences(ctx)
	fs := make([]*Fence, 0, len(old)+1)
	fs = append(append(fs, old...), f)
	return context.WithValue(ctx, fenceKey{}, fs)
}

// Fences returns the fences ctx carries.
func Fences(ctx context.Context) []*Fence {
	fs, _ := ctx.Value(fenceKey{}).([]*Fence)
	return fs
}

// MaxFences is how many fences one commit compares at most: a store
// keeps room for them in its Limits.
const MaxFences = 2

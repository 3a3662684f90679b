package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/branchnfs/branchnfs/branches"
)

// What Exec does with the branch when the command exits on its own.
const (
	OnExitCommit = "commit" // commit on exit 0, abort otherwise
	OnExitAbort  = "abort"  // always abort
	OnExitKeep   = "keep"   // leave the branch live
)

// CheckOnExit validates an --on-exit value.
func CheckOnExit(s string) error {
	switch s {
	case OnExitCommit, OnExitAbort, OnExitKeep:
		return nil
	}
	return fmt.Errorf("on-exit %q: want commit, abort or keep", s)
}

// Exec runs argv in branch, supervised, and applies onExit when it exits.
// A tree that is killed (timeout, ctx, the branch aborted or invalidated
// from elsewhere) has its branch fenced (aborted) first, whatever onExit
// says: it was stopped in the middle of its work. The error is for what
// prevented the start; what happened afterwards is in the Record
// (Record.Err for a failed commit or abort).
func Exec(ctx context.Context, o Options, branch, onExit string, argv []string) (rec Record, err error) {
	o.EnsureDefaults()
	if err := CheckOnExit(onExit); err != nil {
		return Record{}, err
	}
	in, err := o.Backend.Get(ctx, branch)
	if err != nil {
		return Record{}, err
	}
	if err := liveErr(in); err != nil {
		return Record{}, err
	}
	if in.Parent == "" && onExit != OnExitKeep {
		return Record{}, fmt.Errorf("%w: %q is the root branch: it can be neither committed nor aborted (use --on-exit keep)", branches.ErrReadOnly, branch)
	}
	r, err := o.startAttempt(branch, in.Parent, NewID(), argv, false, o.Stdout, o.Stderr)
	if err != nil {
		return r.rec, err
	}
	o.hold(ctx, r, "exec")
	defer o.release(ctx, r)
	defer func() {
		r.setOutcome(r.rec.KilledBy == "" && r.rec.ExitCode == 0 && r.rec.Signal == 0 && r.rec.err == nil)
		rec.Outcome = r.rec.Outcome
	}()
	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	poll := time.NewTicker(o.Poll)
	defer poll.Stop()
	for {
		select {
		case <-r.a.Exited():
			o.exited(ctx, r, onExit)
			return r.rec, nil
		case <-timeout:
			o.kill(ctx, r, KilledByTimeout, false)
			return r.rec, nil
		case <-ctx.Done():
			o.kill(ctx, r, KilledByInterrupt, false)
			return r.rec, nil
		case <-poll.C:
			if gone, state := o.branchGone(ctx, branch); gone {
				r.rec.State = state
				o.kill(ctx, r, KilledByBranch, true)
				return r.rec, nil
			}
		}
	}
}

// exited applies onExit to an attempt whose leader exited on its own. An
// attempt whose helper died was killed, and its branch is aborted whatever
// onExit says: what it did is not to be trusted.
func (o *Options) exited(ctx context.Context, r *running, onExit string) {
	o.settle(ctx, r)
	switch {
	case r.rec.KilledBy != "":
		o.abort(ctx, r)
	case onExit == OnExitCommit && r.rec.ExitCode == 0 && r.rec.Signal == 0:
		o.diff(ctx, r)
		r.rec.fail(o.commit(ctx, r))
	case onExit == OnExitKeep:
		o.diff(ctx, r)
	default:
		o.abort(ctx, r)
	}
}

// branchGone reports whether branch was aborted, committed or invalidated
// by someone else, and its state. An unreachable server is not "gone".
func (o *Options) branchGone(ctx context.Context, branch string) (bool, branches.State) {
	in, err := o.Backend.Get(ctx, branch)
	switch {
	case errors.Is(err, branches.ErrNotFound):
		return true, branches.StateAborted
	case err != nil:
		return false, ""
	case in.State != branches.StateLive:
		return true, in.State
	}
	return false, ""
}

func liveErr(in branches.Info) error {
	switch in.State {
	case branches.StateLive:
		return nil
	case branches.StateInvalidated:
		return &branches.InvalidatedError{Branch: in.Name, By: in.InvalidatedBy}
	}
	return fmt.Errorf("%w: branch %q is %s", branches.ErrStale, in.Name, in.State)
}

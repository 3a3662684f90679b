package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/branches"
)

// Backend is the part of the branch API the runner uses.
// *branches.Manager and the control API's *control.Client implement it.
type Backend interface {
	Get(ctx context.Context, name string) (branches.Info, error)
	Fork(ctx context.Context, parent, name string) (branches.Info, error)
	Commit(ctx context.Context, name string) (branches.CommitResult, error)
	Abort(ctx context.Context, name string) (branches.AbortResult, error)
	Diff(ctx context.Context, name string) (branches.Diff, error)
}

var _ Backend = (*branches.Manager)(nil)

// Options configures the runner. Backend and Workdir are required.
type Options struct {
	Backend Backend
	// Workdir returns the working directory of an attempt in branch: the
	// branch's directory in a mount of the export /.
	Workdir func(branch string) (string, error)
	// Flush makes what the client wrote under dir reach the server
	// (default: syncfs on Linux, sync on macOS).
	Flush func(dir string) error
	// Store is the store directory, passed as BRANCHNFS_STORE.
	Store string
	// Grace is the time between SIGTERM and SIGKILL (default 2s).
	Grace time.Duration
	// Timeout bounds each attempt; 0 means none.
	Timeout time.Duration
	// Poll is how often a running attempt's branch is checked for an abort
	// or invalidation from elsewhere (default 200ms).
	Poll time.Duration
	// Stdin, Stdout and Stderr are Exec's command's files; nil: /dev/null.
	Stdin, Stdout, Stderr *os.File
	// LogDir receives each Race and BestOf attempt's output, as
	// LogDir/BRANCH.log (default: discarded).
	LogDir string
	// Helper is passed to attempt.Options.
	Helper string
	// Env is the base environment of attempts (default os.Environ()).
	Env    []string
	Logger *slog.Logger
	// Lease is the lease the runner keeps on each attempt's branch while it
	// supervises it, renewing it every third of it (default 30s; < 0: none).
	// Should the runner die, the lease expires and the server aborts the
	// branch. Backends without leases (no SetMeta) get none.
	Lease time.Duration
	// Events, if set, is called for each step of each attempt, from the
	// runner's goroutines (it must be safe for concurrent use and quick).
	Events func(Event)
}

// Event is one step of an attempt. JSON field names are part of the API's
// event stream.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // started, ended, committed, aborted
	Branch  string    `json:"branch"`
	Attempt string    `json:"attempt"`
	PID     int       `json:"pid,omitempty"`    // started
	Record  *Record   `json:"record,omitempty"` // ended, committed, aborted
}

func (o *Options) emit(kind string, r *running) {
	if o.Events == nil {
		return
	}
	ev := Event{Time: time.Now().UTC(), Kind: kind, Branch: r.rec.Branch, Attempt: r.rec.Attempt}
	if kind == "started" {
		ev.PID = r.rec.Supervision.PID
	} else {
		rec := r.rec
		ev.Record = &rec
	}
	o.Events(ev)
}

// EnsureDefaults fills zero fields with defaults.
func (o *Options) EnsureDefaults() {
	if o.Grace <= 0 {
		o.Grace = 2 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Flush == nil {
		o.Flush = flush
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
}

// metaSetter is a Backend that keeps labels, scores and leases.
type metaSetter interface {
	SetMeta(ctx context.Context, name string, u branches.MetaUpdate) (branches.Meta, error)
}

// setMeta applies u to r's branch if the backend keeps meta; a failure is
// logged (meta is advisory; the branch's state is what counts).
func (o *Options) setMeta(ctx context.Context, r *running, u branches.MetaUpdate) {
	ms, ok := o.Backend.(metaSetter)
	if !ok {
		return
	}
	if _, err := ms.SetMeta(context.WithoutCancel(ctx), r.rec.Branch, u); err != nil && !errors.Is(err, branches.ErrStale) && !errors.Is(err, branches.ErrNotFound) {
		o.Logger.Warn("runner: set meta", "branch", r.rec.Branch, "err", err)
	}
}

// hold labels r's branch with its attempt and keeps a lease on it until
// release.
func (o *Options) hold(ctx context.Context, r *running, kind string) {
	u := branches.MetaUpdate{Labels: map[string]string{"attempt": r.rec.Attempt, "runner": kind}}
	// The root branch cannot be aborted, so it takes no lease.
	if _, ok := o.Backend.(metaSetter); !ok || o.Lease < 0 || r.rec.Parent == "" {
		o.setMeta(ctx, r, u)
		return
	}
	u.LeaseMS = o.Lease.Milliseconds()
	o.setMeta(ctx, r, u)
	stop := make(chan struct{})
	r.stopLease = stop
	go func() {
		t := time.NewTicker(o.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				o.setMeta(ctx, r, branches.MetaUpdate{LeaseMS: o.Lease.Milliseconds()})
			}
		}
	}()
}

// release stops renewing r's lease and removes it from a branch left live.
func (o *Options) release(ctx context.Context, r *running) {
	if r.stopLease == nil {
		return
	}
	close(r.stopLease)
	r.stopLease = nil
	if r.rec.State == branches.StateLive {
		o.setMeta(ctx, r, branches.MetaUpdate{LeaseMS: -1})
	}
}

// Why an attempt's tree was killed (Record.KilledBy).
const (
	KilledByTimeout   = "timeout"
	KilledByInterrupt = "interrupt"   // Ctrl-C, or the caller's context ended
	KilledBySibling   = "sibling"     // a sibling won the race
	KilledByBranch    = "branch_gone" // the branch was aborted or invalidated from elsewhere
	// KilledByHelperDied: the helper holding the tree died (a process of
	// the tree killed it, say); what was left of the tree was killed and the
	// branch is fenced, whatever on-exit says.
	KilledByHelperDied = "helper_died"
)

// What became of an attempt (Record.Outcome).
const (
	OutcomeWon         = "won"          // committed (race, best-of), kept (best-of --keep), or ran to exit 0 (exec)
	OutcomeLost        = "lost"         // a sibling won: killed, or exited on its own before the race was decided
	OutcomeFailed      = "failed"       // exited non-zero, was killed by a signal, failed to start, or its commit was refused
	OutcomeTimedOut    = "timed_out"    // killed at the timeout
	OutcomeCheckFailed = "check_failed" // exited 0, but the check (or score command) failed
	OutcomeInterrupted = "interrupted"  // killed because the caller stopped (Ctrl-C, job cancelled) or its branch went away
)

// setOutcome fills in Record.Outcome once the attempt is over.
func (r *running) setOutcome(won bool) {
	rec := &r.rec
	switch {
	case won:
		rec.Outcome = OutcomeWon
	case rec.KilledBy == KilledBySibling:
		rec.Outcome = OutcomeLost
	case rec.KilledBy == KilledByTimeout:
		rec.Outcome = OutcomeTimedOut
	case rec.KilledBy == KilledByInterrupt, rec.KilledBy == KilledByBranch:
		rec.Outcome = OutcomeInterrupted
	case rec.Check != nil && *rec.Check != 0:
		rec.Outcome = OutcomeCheckFailed
	case rec.ExitCode != 0 || rec.Signal != 0:
		rec.Outcome = OutcomeFailed
	case rec.err != nil:
		rec.Outcome = OutcomeFailed
	default:
		rec.Outcome = OutcomeLost
	}
}

// Summary counts a diff.
type Summary struct {
	Added    int   `json:"added"`
	Modified int   `json:"modified"`
	Deleted  int   `json:"deleted"`
	Bytes    int64 `json:"bytes"`
}

func summarize(d branches.Diff) *Summary {
	s := &Summary{}
	for _, c := range d.Changes {
		switch c.Kind {
		case branches.Added:
			s.Added++
		case branches.Modified:
			s.Modified++
		case branches.Deleted:
			s.Deleted++
		}
		s.Bytes += c.Bytes
	}
	return s
}

// Record is the outcome of one attempt. JSON field names are part of the
// CLI's --json output and of the API.
type Record struct {
	Branch     string         `json:"branch"`
	Parent     string         `json:"parent"`
	Attempt    string         `json:"attempt"`
	ExitCode   int            `json:"exit_code"` // -1 when killed by a signal
	Signal     int            `json:"signal"`
	State      branches.State `json:"state"` // of the branch afterwards
	DurationMS int64          `json:"duration_ms"`
	KilledBy   string         `json:"killed_by,omitempty"`
	// Outcome says what became of the attempt: won, lost, failed,
	// timed_out, check_failed or interrupted (the Outcome constants).
	Outcome string `json:"outcome"`
	// LeftoverKilled: the leader exited but processes it left behind ran
	// past the grace period and were killed.
	LeftoverKilled bool     `json:"leftover_killed,omitempty"`
	Check          *int     `json:"check_exit_code,omitempty"` // exit code of --check
	Score          *float64 `json:"score,omitempty"`
	Diff           *Summary `json:"diff,omitempty"` // what the attempt changed, taken when it exited
	// Supervision says how the tree was held (cgroup, subreaper, process
	// group) and, without a cgroup, why.
	Supervision attempt.Info           `json:"supervision"`
	Commit      *branches.CommitResult `json:"commit,omitempty"`
	Log         string                 `json:"log,omitempty"`
	Error       string                 `json:"error,omitempty"`
	err         error
}

// Err is the error behind Record.Error: a failed commit or abort, or a
// failed start.
func (r *Record) Err() error { return r.err }

func (r *Record) fail(err error) {
	if err != nil && r.err == nil {
		r.err = err
		r.Error = err.Error()
	}
}

// ExitStatus is the exit code a CLI reports for the attempt: the leader's
// own, or 128+n for signal n.
func (r *Record) ExitStatus() int {
	if r.Signal != 0 {
		return 128 + r.Signal
	}
	return r.ExitCode
}

// NewID returns a fresh attempt ID: 8 hex digits.
func NewID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// running is one attempt being supervised.
type running struct {
	rec   Record
	a     *attempt.Attempt
	dir   string
	start time.Time
	logf  *os.File
	ended bool // the tree is gone
	// stopLease stops the lease renewal (nil: none runs).
	stopLease chan struct{}
}

// startAttempt starts argv in branch (already forked from parent).
func (o *Options) startAttempt(branch, parent, id string, argv []string, score bool, stdout, stderr *os.File) (*running, error) {
	r := &running{rec: Record{Branch: branch, Parent: parent, Attempt: id, State: branches.StateLive}, start: time.Now()}
	dir, err := o.Workdir(branch)
	if err != nil {
		return r, err
	}
	r.dir = dir
	env := append(append([]string{}, o.Env...),
		"BRANCHNFS_BRANCH="+branch, "BRANCHNFS_PARENT="+parent,
		"BRANCHNFS_ATTEMPT="+id, "BRANCHNFS_STORE="+o.Store)
	if o.LogDir != "" && stdout == nil {
		f, err := os.OpenFile(filepath.Join(o.LogDir, branch+".log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return r, fmt.Errorf("runner: attempt log: %w", err)
		}
		r.logf, r.rec.Log = f, f.Name()
		stdout, stderr = f, f
	}
	a, err := attempt.Start(attempt.Options{
		Argv: argv, Dir: dir, Env: env,
		Stdin: o.Stdin, Stdout: stdout, Stderr: stderr,
		Score: score, Grace: o.Grace, Helper: o.Helper,
	})
	if err != nil {
		if r.logf != nil {
			r.logf.Close()
		}
		return r, err
	}
	r.a = a
	r.rec.Supervision = a.Info()
	o.emit("started", r)
	return r, nil
}

// finish fills in the leader's status and duration once the tree is gone.
func (r *running) finish() {
	st := r.a.Status()
	r.rec.ExitCode, r.rec.Signal = st.Code, st.Signal
	r.rec.DurationMS = time.Since(r.start).Milliseconds()
	if err := r.a.Err(); err != nil {
		r.rec.fail(err)
		if errors.Is(err, attempt.ErrHelperDied) && r.rec.KilledBy == "" {
			r.rec.KilledBy = KilledByHelperDied
		}
	}
	if r.logf != nil {
		r.logf.Close()
		r.logf = nil
	}
	r.ended = true
}

// kill fences the branch (unless fenced is set: already invalidated) and
// ends the tree.
func (o *Options) kill(ctx context.Context, r *running, why string, fenced bool) {
	if r.ended {
		return
	}
	if !fenced {
		o.fence(ctx, r)
	}
	r.rec.KilledBy = why
	o.end(ctx, r)
}

// fence aborts the branch so that its handles answer STALE.
func (o *Options) fence(ctx context.Context, r *running) {
	if r.rec.State != branches.StateLive {
		return
	}
	if _, err := o.Backend.Abort(context.WithoutCancel(ctx), r.rec.Branch); err != nil && !errors.Is(err, branches.ErrNotFound) {
		r.rec.fail(fmt.Errorf("runner: fence %s: %w", r.rec.Branch, err))
		return
	}
	r.rec.State = branches.StateAborted
}

// end ends the tree (SIGTERM, grace, SIGKILL) and waits until it is gone.
func (o *Options) end(ctx context.Context, r *running) {
	if r.ended {
		return
	}
	// Even when the caller's context ends, the tree must be gone before
	// the runner returns.
	if _, err := r.a.End(context.WithoutCancel(ctx), o.Grace); err != nil {
		r.rec.fail(err)
	}
	r.finish()
	o.emit("ended", r)
}

// settle waits for what an exited leader left running, up to the grace
// period, then ends it. It reports whether something had to be ended.
func (o *Options) settle(ctx context.Context, r *running) bool {
	t := time.NewTimer(o.Grace)
	defer t.Stop()
	select {
	case <-r.a.Done():
		r.finish()
		o.emit("ended", r)
		return false
	case <-t.C:
	case <-ctx.Done():
	}
	o.end(ctx, r)
	r.rec.LeftoverKilled = true
	return true
}

// commit flushes the attempt's directory and commits its branch.
func (o *Options) commit(ctx context.Context, r *running) error {
	if err := o.Flush(r.dir); err != nil {
		return fmt.Errorf("runner: flush %s before the commit: %w", r.dir, err)
	}
	// The diff counts what the commit brings in: a fast-path commit does
	// not look at the change (it stays O(1)) and leaves changes out.
	d, derr := o.Backend.Diff(ctx, r.rec.Branch)
	if derr == nil {
		r.rec.Diff = summarize(d)
	}
	res, err := o.Backend.Commit(context.WithoutCancel(ctx), r.rec.Branch)
	if err != nil {
		return err
	}
	if res.FastPath && derr == nil {
		res.Changes = len(d.Changes)
	}
	r.rec.Commit = &res
	r.rec.State = branches.StateCommitted
	o.emit("committed", r)
	return nil
}

// abort aborts a branch whose tree is gone (no fence needed).
func (o *Options) abort(ctx context.Context, r *running) {
	if r.rec.State == branches.StateCommitted || r.rec.State == branches.StateAborted {
		return
	}
	if _, err := o.Backend.Abort(context.WithoutCancel(ctx), r.rec.Branch); err != nil && !errors.Is(err, branches.ErrNotFound) {
		r.rec.fail(fmt.Errorf("runner: abort %s: %w", r.rec.Branch, err))
		return
	}
	r.rec.State = branches.StateAborted
	o.emit("aborted", r)
}

func (o *Options) diff(ctx context.Context, r *running) {
	if d, err := o.Backend.Diff(ctx, r.rec.Branch); err == nil {
		r.rec.Diff = summarize(d)
	}
}

// runCheck runs argv in dir and returns its exit code (bounded by the
// attempt timeout, if any).
func (o *Options) runCheck(ctx context.Context, r *running, argv []string, stdout *os.File) (int, error) {
	env := append(append([]string{}, o.Env...),
		"BRANCHNFS_BRANCH="+r.rec.Branch, "BRANCHNFS_PARENT="+r.rec.Parent,
		"BRANCHNFS_ATTEMPT="+r.rec.Attempt, "BRANCHNFS_STORE="+o.Store)
	logf := r.logFile()
	if logf != nil {
		defer logf.Close()
	}
	out := stdout
	if out == nil {
		out = logf
	}
	a, err := attempt.Start(attempt.Options{Argv: argv, Dir: r.dir, Env: env, Stdout: out, Stderr: logf, Grace: o.Grace, Helper: o.Helper})
	if err != nil {
		return 127, err
	}
	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-a.Exited():
	case <-timeout:
	case <-ctx.Done():
	}
	if _, err := a.End(context.WithoutCancel(ctx), o.Grace); err != nil {
		return -1, err
	}
	return a.Status().ExitCode(), ctx.Err()
}

// logFile opens the attempt's log for appending (nil without one); the
// caller closes it.
func (r *running) logFile() *os.File {
	if r.rec.Log == "" {
		return nil
	}
	f, err := os.OpenFile(r.rec.Log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil
	}
	return f
}

// parseScore reads a number from what an attempt printed.
func parseScore(b []byte) (float64, bool) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, false
	}
	var v float64
	if _, err := fmt.Sscan(string(f[len(f)-1]), &v); err != nil {
		return 0, false
	}
	return v, true
}

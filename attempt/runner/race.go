package runner

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/branchnfs/branchnfs/branches"
)

// RaceSpec describes a race: one attempt per command, all forked from
// Parent.
type RaceSpec struct {
	Parent string
	Cmds   [][]string
	// Check, if set, runs in an attempt's branch after it exits 0; the
	// attempt wins only if the check exits 0 too.
	Check []string
}

// BranchName is the name of attempt i of attempt id forked from parent:
// PARENT-ID-I, with PARENT cut so that the name fits in 64 bytes.
func BranchName(parent, id string, i int) string {
	suffix := "-" + id + "-" + strconv.Itoa(i)
	if len(parent)+len(suffix) > 64 {
		parent = parent[:64-len(suffix)]
	}
	return parent + suffix
}

// forkAll forks one branch per attempt, all at once (the store orders the
// forks; they do not wait on each other's round trips); on failure it
// aborts the ones it made.
func (o *Options) forkAll(ctx context.Context, parent, id string, n int) ([]string, error) {
	names := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		names[i] = BranchName(parent, id, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = o.Backend.Fork(ctx, parent, names[i])
		}()
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err != nil {
			first = err
			break
		}
	}
	if first == nil {
		return names, nil
	}
	for i, b := range names {
		if errs[i] == nil {
			o.Backend.Abort(context.WithoutCancel(ctx), b)
		}
	}
	return nil, first
}

// startAll forks and starts one attempt per command: every branch is
// forked first, then the trees are started together, so that no attempt
// gets a head start of its siblings' start-up. Attempts that fail to start
// are recorded, aborted and marked ended.
func (o *Options) startAll(ctx context.Context, kind, parent string, cmds [][]string, score bool) ([]*running, error) {
	id := NewID()
	names, err := o.forkAll(ctx, parent, id, len(cmds))
	if err != nil {
		return nil, err
	}
	rs := make([]*running, len(cmds))
	var wg sync.WaitGroup
	for i, argv := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := o.startAttempt(names[i], parent, id, argv, score, nil, nil)
			if err != nil {
				r.rec.fail(err)
				r.rec.ExitCode = 127
				r.ended = true
				o.abort(ctx, r)
			}
			rs[i] = r
		}()
	}
	wg.Wait()
	for _, r := range rs {
		if !r.ended {
			o.hold(ctx, r, kind)
		}
	}
	return rs, nil
}

// Race runs one attempt per command in parallel. The first to exit 0 and
// pass the check commits; the commit invalidates its siblings in the same
// transaction (their handles answer STALE from then on), and their trees
// are then killed and their branches aborted. Attempts that fail are
// aborted. Records come back in command order.
func Race(ctx context.Context, o Options, spec RaceSpec) ([]Record, error) {
	o.EnsureDefaults()
	if len(spec.Cmds) == 0 {
		return nil, fmt.Errorf("race: no command")
	}
	rs, err := o.startAll(ctx, "race", spec.Parent, spec.Cmds, false)
	if err != nil {
		return nil, err
	}
	exits := make(chan int, len(rs))
	pending := 0
	for i, r := range rs {
		if r.ended {
			continue
		}
		pending++
		go func() { <-r.a.Exited(); exits <- i }()
	}
	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	winner := -1
	stop := ""
	for pending > 0 && winner < 0 && stop == "" {
		select {
		case i := <-exits:
			pending--
			r := rs[i]
			o.settle(ctx, r)
			if r.rec.ExitCode != 0 || r.rec.Signal != 0 || r.rec.err != nil {
				o.abort(ctx, r)
				continue
			}
			o.diff(ctx, r)
			if len(spec.Check) > 0 {
				code, err := o.runCheck(ctx, r, spec.Check, nil)
				r.rec.Check = &code
				if err != nil || code != 0 {
					r.rec.fail(err)
					o.abort(ctx, r)
					continue
				}
			}
			if err := o.commit(ctx, r); err != nil {
				r.rec.fail(err)
				o.abort(ctx, r)
				continue
			}
			winner = i
		case <-timeout:
			stop = KilledByTimeout
		case <-ctx.Done():
			stop = KilledByInterrupt
		}
	}
	// Losers: already fenced by the winner's commit (invalidated), else
	// fenced now; then their trees are ended in parallel.
	var wg sync.WaitGroup
	for _, r := range rs {
		if r.ended {
			continue
		}
		if winner >= 0 {
			r.rec.State = branches.StateInvalidated
		}
		select {
		case <-r.a.Exited():
			// It ended on its own before the race was decided (its exit
			// was not handled yet): not killed, but what it left running
			// is ended.
			wg.Add(1)
			go func() { defer wg.Done(); o.settle(ctx, r) }()
			continue
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			why := stop
			if winner >= 0 {
				why = KilledBySibling
			}
			o.kill(ctx, r, why, winner >= 0)
		}()
	}
	wg.Wait()
	out := make([]Record, len(rs))
	for i, r := range rs {
		if i != winner {
			o.abort(ctx, r)
		}
		o.release(ctx, r)
		r.setOutcome(i == winner)
		out[i] = r.rec
	}
	return out, nil
}

// BestOfSpec describes a best-of run: N attempts of one command.
type BestOfSpec struct {
	Parent string
	N      int
	Argv   []string
	// ScoreCmd, if set, runs in each attempt's branch after it ends; the
	// last number it prints is the score. Otherwise the score is the last
	// number the attempt wrote to file descriptor 3, else 1 for exit 0 and
	// 0 otherwise.
	ScoreCmd []string
	// Keep > 0 keeps the Keep best attempts live and commits none (a commit
	// would invalidate them); the others are aborted.
	Keep int
	// NoCommit commits none (for rollouts); all are aborted unless Keep.
	NoCommit bool
}

// BestOf runs N attempts to their end (a timeout kills them), scores each,
// and commits the best of those that exited 0. Records come back in
// attempt order.
func BestOf(ctx context.Context, o Options, spec BestOfSpec) ([]Record, error) {
	o.EnsureDefaults()
	if spec.N <= 0 || len(spec.Argv) == 0 {
		return nil, fmt.Errorf("best-of: need N > 0 and a command")
	}
	cmds := make([][]string, spec.N)
	for i := range cmds {
		cmds[i] = spec.Argv
	}
	rs, err := o.startAll(ctx, "best-of", spec.Parent, cmds, len(spec.ScoreCmd) == 0)
	if err != nil {
		return nil, err
	}
	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var wg sync.WaitGroup
	for _, r := range rs {
		if r.ended {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-r.a.Exited():
				o.settle(ctx, r)
			case <-timeout:
				o.kill(ctx, r, KilledByTimeout, false)
			case <-ctx.Done():
				o.kill(ctx, r, KilledByInterrupt, false)
			}
		}()
	}
	wg.Wait()
	var eligible []*running
	for _, r := range rs {
		if r.rec.State != branches.StateLive || r.rec.err != nil {
			continue
		}
		o.diff(ctx, r)
		if s, ok := o.score(ctx, r, spec.ScoreCmd); ok {
			r.rec.Score = &s
			o.setMeta(ctx, r, branches.MetaUpdate{Score: &s})
			if r.rec.ExitCode == 0 && r.rec.Signal == 0 {
				eligible = append(eligible, r)
			}
		}
	}
	sort.SliceStable(eligible, func(i, j int) bool { return *eligible[i].rec.Score > *eligible[j].rec.Score })
	keep := map[*running]bool{}
	switch {
	case spec.Keep > 0:
		for i := 0; i < spec.Keep && i < len(eligible); i++ {
			keep[eligible[i]] = true
		}
	case !spec.NoCommit && len(eligible) > 0 && ctx.Err() == nil:
		best := eligible[0]
		if err := o.commit(ctx, best); err != nil {
			best.rec.fail(err)
		}
	}
	out := make([]Record, len(rs))
	for i, r := range rs {
		if !keep[r] {
			o.abort(ctx, r)
		}
		o.release(ctx, r)
		r.setOutcome(keep[r] || r.rec.State == branches.StateCommitted)
		out[i] = r.rec
	}
	return out, nil
}

// score scores an ended attempt.
func (o *Options) score(ctx context.Context, r *running, scoreCmd []string) (float64, bool) {
	if len(scoreCmd) > 0 {
		pr, pw, err := os.Pipe()
		if err != nil {
			r.rec.fail(err)
			return 0, false
		}
		outc := make(chan []byte, 1)
		go func() {
			b := make([]byte, 0, 256)
			buf := make([]byte, 4096)
			for {
				n, err := pr.Read(buf)
				if len(b) < maxScoreOutput {
					b = append(b, buf[:n]...)
				}
				if err != nil {
					break
				}
			}
			pr.Close()
			outc <- b
		}()
		code, err := o.runCheck(ctx, r, scoreCmd, pw)
		pw.Close()
		out := <-outc
		if err != nil || code != 0 {
			r.rec.fail(fmt.Errorf("score command exited %d: %v", code, err))
			return 0, false
		}
		s, ok := parseScore(out)
		if !ok {
			r.rec.fail(fmt.Errorf("score command printed no number: %q", out))
		}
		return s, ok
	}
	if s, ok := parseScore(r.a.Score()); ok {
		return s, true
	}
	if r.rec.ExitCode == 0 && r.rec.Signal == 0 {
		return 1, true
	}
	return 0, true
}

const maxScoreOutput = 4096

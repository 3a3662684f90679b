package attempt

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// helperEnv carries the helper's configuration (JSON) from Start to
// RunHelper. The helper removes it before starting the command.
const helperEnv = "BRANCHNFS_ATTEMPT_HELPER"

// maxScore bounds what is read from the score pipe.
const maxScore = 4096

// Options configures an attempt. Argv is required; zero values mean
// defaults.
type Options struct {
	// Argv is the command and its arguments; Argv[0] is looked up in PATH
	// unless it holds a slash.
	Argv []string
	// Dir is the working directory of the command (default: the current one).
	Dir string
	// Env is the command's environment (default: os.Environ()).
	Env []string
	// Stdin, Stdout and Stderr are the command's standard files (default:
	// /dev/null).
	Stdin, Stdout, Stderr *os.File
	// Score gives the command a pipe as file descriptor 3; what the tree
	// writes there (up to 4 KiB) is returned by Score once the tree is gone.
	Score bool
	// NoCgroup skips the cgroup v2 subtree on Linux.
	NoCgroup bool
	// Grace is how long the helper waits between SIGTERM and SIGKILL when
	// it ends the tree by itself, because the supervisor died (default 2s).
	Grace time.Duration
	// Helper is the binary started as the helper; it must call RunHelper
	// first thing (default: os.Executable()).
	Helper string
}

// EnsureDefaults fills zero fields with defaults.
func (o *Options) EnsureDefaults() error {
	if o.Grace <= 0 {
		o.Grace = 2 * time.Second
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Helper == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("attempt: cannot find this program's binary to start the helper: %w", err)
		}
		o.Helper = exe
	}
	return nil
}

// Info says how a started attempt is supervised. JSON field names are part
// of the CLI's --json output.
type Info struct {
	PID  int `json:"pid"`  // the command (the tree's leader)
	PGID int `json:"pgid"` // its process group and session
	// Isolation is "cgroup" (cgroup v2 subtree + subreaper + process
	// group), "subreaper" (subreaper + process group) or "process-group".
	Isolation string `json:"isolation"`
	Cgroup    string `json:"cgroup,omitempty"` // the cgroup directory
	// Fallback says why no cgroup is used, and how to get one.
	Fallback string `json:"fallback,omitempty"`
}

// Status is how the tree's leader ended.
type Status struct {
	Code   int `json:"exit_code"` // exit status, -1 when killed by a signal
	Signal int `json:"signal"`    // the signal that killed it, 0 if none
}

// ExitCode is Code, or 128+Signal for a leader killed by a signal (as a
// shell reports it).
func (s Status) ExitCode() int {
	if s.Signal != 0 {
		return 128 + s.Signal
	}
	return s.Code
}

// Success reports whether the leader exited with status 0.
func (s Status) Success() bool { return s.Signal == 0 && s.Code == 0 }

// ErrStart is matched by the error of an attempt whose command could not
// be started (not found, not executable, bad directory).
var ErrStart = errors.New("attempt: cannot start the command")

// ErrHelperDied is matched by Err of an attempt whose helper died before
// the tree was gone (a process of the tree killed it, say). The supervisor
// then killed what was left of the tree (on Linux every process of it,
// since the supervisor is a child subreaper; on macOS its process group
// and session);
// the tree's work is not to be trusted, and its branch should be fenced.
var ErrHelperDied = errors.New("attempt: the helper died before the tree was gone")

// event is one line the helper writes to the supervisor.
type event struct {
	Event  string `json:"event"` // started, exited, gone, error
	Info   Info   `json:"info,omitzero"`
	Status Status `json:"status,omitzero"`
	Error  string `json:"error,omitempty"`
}

// helperConfig is what Start passes to the helper.
type helperConfig struct {
	Argv     []string      `json:"argv"`
	Dir      string        `json:"dir,omitempty"`
	Score    bool          `json:"score,omitempty"`
	NoCgroup bool          `json:"no_cgroup,omitempty"`
	Grace    time.Duration `json:"grace"`
}

// Attempt is a supervised process tree.
type Attempt struct {
	helper  *exec.Cmd // read only
	started chan struct{}
	exited  chan struct{}
	done    chan struct{}
	scoreCh chan []byte // nil without Options.Score

	ctlMu sync.Mutex // protects the following
	ctl   *os.File   // nil once closed

	mu     sync.Mutex // protects the following
	info   Info
	status Status
	err    error // start failure or helper failure
	score  []byte
}

// Start starts the command of opts under a helper and returns once the
// command runs (or failed to start: then the error matches ErrStart).
func Start(opts Options) (*Attempt, error) {
	if len(opts.Argv) == 0 {
		return nil, errors.New("attempt: no command")
	}
	if err := opts.EnsureDefaults(); err != nil {
		return nil, err
	}
	// Where it fails, killOrphans reports it, should a helper die.
	holdOrphans()
	cfg, err := json.Marshal(helperConfig{Argv: opts.Argv, Dir: opts.Dir, Score: opts.Score, NoCgroup: opts.NoCgroup, Grace: opts.Grace})
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	var closeLater []*os.File // the helper's ends, closed here once it runs
	closeLater = append(closeLater, ctlR, evW)
	extra := []*os.File{ctlR, evW}
	var scoreR *os.File
	if opts.Score {
		r, w, err := os.Pipe()
		if err != nil {
			ctlR.Close()
			ctlW.Close()
			evR.Close()
			evW.Close()
			return nil, err
		}
		scoreR = r
		extra = append(extra, w)
		closeLater = append(closeLater, w)
	}
	h := exec.Command(opts.Helper)
	h.Env = append(append([]string{}, opts.Env...), helperEnv+"="+string(cfg))
	// A nil *os.File must stay a nil interface: exec.Cmd then gives the
	// helper /dev/null, where a typed nil would leave the descriptor closed
	// (and the next file the helper opens would take its number).
	if opts.Stdin != nil {
		h.Stdin = opts.Stdin
	}
	if opts.Stdout != nil {
		h.Stdout = opts.Stdout
	}
	if opts.Stderr != nil {
		h.Stderr = opts.Stderr
	}
	h.ExtraFiles = extra
	err = h.Start()
	for _, f := range closeLater {
		f.Close()
	}
	if err != nil {
		ctlW.Close()
		evR.Close()
		if scoreR != nil {
			scoreR.Close()
		}
		return nil, fmt.Errorf("attempt: start the helper %s: %w", opts.Helper, err)
	}
	a := &Attempt{
		helper:  h,
		started: make(chan struct{}),
		exited:  make(chan struct{}),
		done:    make(chan struct{}),
		ctl:     ctlW,
	}
	if scoreR != nil {
		a.scoreCh = make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(io.LimitReader(scoreR, maxScore))
			io.Copy(io.Discard, scoreR) // let writers finish
			scoreR.Close()
			a.scoreCh <- b
		}()
	}
	go a.readEvents(evR)
	<-a.started
	a.mu.Lock()
	err = a.err
	a.mu.Unlock()
	if err != nil {
		<-a.done
		return nil, err
	}
	return a, nil
}

// readEvents follows the helper's events until it exits.
func (a *Attempt) readEvents(r *os.File) {
	var startedOnce, exitedOnce sync.Once
	start := func() { startedOnce.Do(func() { close(a.started) }) }
	exit := func() { exitedOnce.Do(func() { close(a.exited) }) }
	sc := bufio.NewScanner(r)
	gone := false
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		a.mu.Lock()
		switch ev.Event {
		case "started":
			a.info = ev.Info
			a.mu.Unlock()
			start()
			continue
		case "error":
			a.err = fmt.Errorf("%w: %s", ErrStart, ev.Error)
			a.status = Status{Code: 127}
		case "exited":
			a.status = ev.Status
			a.mu.Unlock()
			exit()
			continue
		case "gone":
			gone = true
		}
		a.mu.Unlock()
	}
	r.Close()
	werr := a.helper.Wait()
	a.mu.Lock()
	info := a.info
	a.mu.Unlock()
	if !gone {
		// The helper died (killed by the tree itself, say) before it
		// ended the tree: end what is left of it from here.
		n, kerr := killOrphans(info)
		a.mu.Lock()
		if a.err == nil {
			what := "what was left of the tree was killed"
			if n > 0 {
				what = fmt.Sprintf("what was left of the tree (%d processes) was killed", n)
			}
			if kerr != nil {
				what = fmt.Sprintf("ending what was left of the tree failed: %v", kerr)
			}
			a.err = fmt.Errorf("%w: helper pid %d: %v; %s", ErrHelperDied, a.helper.Process.Pid, werr, what)
			if a.status == (Status{}) {
				a.status = Status{Code: -1}
			}
		}
		a.mu.Unlock()
	}
	if a.scoreCh != nil {
		s := <-a.scoreCh
		a.mu.Lock()
		a.score = s
		a.mu.Unlock()
	}
	a.ctlMu.Lock()
	if a.ctl != nil {
		a.ctl.Close()
		a.ctl = nil
	}
	a.ctlMu.Unlock()
	start()
	exit()
	close(a.done)
}

// Info says how the tree is supervised.
func (a *Attempt) Info() Info {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.info
}

// Exited is closed when the tree's leader has exited.
func (a *Attempt) Exited() <-chan struct{} { return a.exited }

// Done is closed when the whole tree is gone.
func (a *Attempt) Done() <-chan struct{} { return a.done }

// Status is how the leader ended; valid once Exited is closed.
func (a *Attempt) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// Err is nil, or why supervision failed (the helper died); valid once Done
// is closed.
func (a *Attempt) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Score is what the tree wrote to file descriptor 3; valid once Done is
// closed.
func (a *Attempt) Score() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.score
}

func (a *Attempt) send(cmd string) {
	a.ctlMu.Lock()
	defer a.ctlMu.Unlock()
	if a.ctl != nil {
		a.ctl.Write([]byte(cmd + "\n")) // the helper is gone: nothing to signal
	}
}

// Terminate sends SIGTERM to every process of the tree.
func (a *Attempt) Terminate() { a.send("term") }

// Kill sends SIGKILL to every process of the tree, and again to any
// process that appears until the tree is gone.
func (a *Attempt) Kill() { a.send("kill") }

// Wait waits until the whole tree is gone, or ctx ends.
func (a *Attempt) Wait(ctx context.Context) error {
	select {
	case <-a.done:
		return a.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// End ends the tree: SIGTERM, then SIGKILL after grace (or at once if
// grace <= 0), then it waits until the whole tree is gone. It reports
// whether SIGKILL was needed. It gives up waiting when ctx ends.
func (a *Attempt) End(ctx context.Context, grace time.Duration) (killed bool, err error) {
	select {
	case <-a.done:
		return false, a.Err()
	default:
	}
	if grace > 0 {
		a.Terminate()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-a.done:
			return false, a.Err()
		case <-t.C:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	a.Kill()
	return true, a.Wait(ctx)
}

// Close lets the helper go: if the tree still runs, the helper ends it
// (SIGTERM, Options.Grace, SIGKILL). Close does not wait.
func (a *Attempt) Close() {
	a.ctlMu.Lock()
	defer a.ctlMu.Unlock()
	if a.ctl != nil {
		a.ctl.Close()
		a.ctl = nil
	}
}

package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
)

// Job kinds (JobRequest.Kind).
const (
	JobExec   = "exec"
	JobRace   = "race"
	JobBestOf = "best_of"
)

// Job states.
const (
	JobRunning = "running"
	JobDone    = "done"   // ran; see its records
	JobFailed  = "failed" // could not run; see error
)

// DefaultJobTimeout bounds an API job that gives no timeout_ms: the server
// supervises API jobs, and none may outlive a forgotten client forever.
const DefaultJobTimeout = time.Hour

// maxJobs bounds the finished jobs the server remembers.
const maxJobs = 1000

// MaxJobAttempts bounds the attempts of one job ("n", or the commands of
// "cmds"): each is a branch and a process tree.
const MaxJobAttempts = 1024

// maxWait bounds a long poll.
const maxWait = 10 * time.Minute

// JobRequest is the body of POST /v1/jobs.
type JobRequest struct {
	Kind     string     `json:"kind"`                // exec, race or best_of
	Branch   string     `json:"branch,omitempty"`    // exec: the branch
	OnExit   string     `json:"on_exit,omitempty"`   // exec: commit, abort or keep (default keep)
	Parent   string     `json:"parent,omitempty"`    // race, best_of
	Argv     []string   `json:"argv,omitempty"`      // exec, best_of, race with n
	N        int        `json:"n,omitempty"`         // race (with argv), best_of
	Cmds     [][]string `json:"cmds,omitempty"`      // race: one argv per attempt
	Check    []string   `json:"check,omitempty"`     // race
	ScoreCmd []string   `json:"score_cmd,omitempty"` // best_of
	Keep     int        `json:"keep,omitempty"`      // best_of
	NoCommit bool       `json:"no_commit,omitempty"` // best_of
	// TimeoutMS bounds each attempt (default one hour; -1: no bound, the
	// job then ends when cancelled or when the server stops).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	GraceMS   int64 `json:"grace_ms,omitempty"` // SIGTERM to SIGKILL (default 2000)
}

// Job is the state of a job (GET /v1/jobs/{id}).
type Job struct {
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	State   string          `json:"state"`
	Started time.Time       `json:"started"`
	Ended   *time.Time      `json:"ended,omitempty"`
	Records []runner.Record `json:"records"`
	Error   *errorDetail    `json:"error,omitempty"` // failed
}

// JobEvent is one line of GET /v1/jobs/{id}/events: an attempt's step, or
// the job's end (kind "done", with the job).
type JobEvent struct {
	runner.Event
	Job *Job `json:"job,omitempty"`
}

// job is a job the server supervises.
type job struct {
	cancel context.CancelFunc // read only
	done   chan struct{}      // closed when the job ends

	mu      sync.Mutex // protects the following
	j       Job
	events  []runner.Event
	changed chan struct{} // closed and replaced on every change
}

func (jb *job) snapshot() (Job, []runner.Event, <-chan struct{}) {
	jb.mu.Lock()
	defer jb.mu.Unlock()
	j := jb.j
	j.Records = append([]runner.Record{}, jb.j.Records...)
	return j, append([]runner.Event{}, jb.events...), jb.changed
}

func (jb *job) update(fn func()) {
	jb.mu.Lock()
	fn()
	close(jb.changed)
	jb.changed = make(chan struct{})
	jb.mu.Unlock()
}

// jobs is the server's job table.
type jobs struct {
	ctx    context.Context // read only: cancelled when the server closes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex // protects the following
	byID map[string]*job
}

func newJobs() *jobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &jobs{ctx: ctx, cancel: cancel, byID: map[string]*job{}}
}

func (s *Server) jobRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/jobs", s.startJob)
	mux.HandleFunc("GET /v1/jobs", s.listJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("DELETE /v1/jobs/{id}", s.cancelJob)
	mux.HandleFunc("GET /v1/jobs/{id}/events", s.jobEvents)
}

func (s *Server) lookupJob(id string) (*job, error) {
	s.jobs.mu.Lock()
	defer s.jobs.mu.Unlock()
	jb, ok := s.jobs.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: no job %q", branches.ErrNotFound, id)
	}
	return jb, nil
}

// checkJob validates a request and returns the run function.
func (s *Server) checkJob(ctx context.Context, req JobRequest) (func(context.Context, runner.Options) ([]runner.Record, error), error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
	}
	if s.opts.Runner == nil {
		if s.opts.NoRunner != "" {
			return nil, bad("%s", s.opts.NoRunner)
		}
		return nil, bad("this server runs no attempts: start it with serve --mount DIR (attempts run in DIR/BRANCH)")
	}
	if req.N > MaxJobAttempts || len(req.Cmds) > MaxJobAttempts {
		return nil, bad("a job runs at most %d attempts (\"n\" is %d, \"cmds\" has %d): split it into several jobs",
			MaxJobAttempts, req.N, len(req.Cmds))
	}
	be := s.opts.Runner.Backend
	switch req.Kind {
	case JobExec:
		if req.Branch == "" || len(req.Argv) == 0 {
			return nil, bad("an exec job needs \"branch\" and \"argv\"")
		}
		if req.OnExit == "" {
			req.OnExit = runner.OnExitKeep
		}
		if err := runner.CheckOnExit(req.OnExit); err != nil {
			return nil, bad("%v", err)
		}
		if _, err := be.Get(ctx, req.Branch); err != nil {
			return nil, err
		}
		return func(ctx context.Context, o runner.Options) ([]runner.Record, error) {
			rec, err := runner.Exec(ctx, o, req.Branch, req.OnExit, req.Argv)
			if err != nil {
				return nil, err
			}
			return []runner.Record{rec}, nil
		}, nil
	case JobRace:
		cmds := req.Cmds
		if len(cmds) == 0 && req.N > 0 && len(req.Argv) > 0 {
			for i := 0; i < req.N; i++ {
				cmds = append(cmds, req.Argv)
			}
		}
		if req.Parent == "" || len(cmds) == 0 {
			return nil, bad("a race job needs \"parent\" and \"cmds\", or \"n\" and \"argv\"")
		}
		for _, c := range cmds {
			if len(c) == 0 {
				return nil, bad("an empty command in \"cmds\"")
			}
		}
		if _, err := be.Get(ctx, req.Parent); err != nil {
			return nil, err
		}
		spec := runner.RaceSpec{Parent: req.Parent, Cmds: cmds, Check: req.Check}
		return func(ctx context.Context, o runner.Options) ([]runner.Record, error) { return runner.Race(ctx, o, spec) }, nil
	case JobBestOf:
		if req.Parent == "" || req.N <= 0 || len(req.Argv) == 0 || req.Keep < 0 {
			return nil, bad("a best_of job needs \"parent\", \"n\" > 0 and \"argv\"")
		}
		if _, err := be.Get(ctx, req.Parent); err != nil {
			return nil, err
		}
		spec := runner.BestOfSpec{Parent: req.Parent, N: req.N, Argv: req.Argv, ScoreCmd: req.ScoreCmd, Keep: req.Keep, NoCommit: req.NoCommit}
		return func(ctx context.Context, o runner.Options) ([]runner.Record, error) {
			return runner.BestOf(ctx, o, spec)
		}, nil
	}
	return nil, bad("job kind %q: want exec, race or best_of", req.Kind)
}

func (s *Server) startJob(w http.ResponseWriter, r *http.Request) {
	var req JobRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.checkJob(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o := *s.opts.Runner
	switch {
	case req.TimeoutMS < 0:
		o.Timeout = 0
	case req.TimeoutMS == 0:
		o.Timeout = DefaultJobTimeout
	default:
		o.Timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	if req.GraceMS > 0 {
		o.Grace = time.Duration(req.GraceMS) * time.Millisecond
	}
	ctx, cancel := context.WithCancel(s.jobs.ctx)
	jb := &job{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
		j: Job{ID: runner.NewID(), Kind: req.Kind, State: JobRunning, Started: time.Now().UTC(), Records: []runner.Record{}}}
	o.Events = func(ev runner.Event) {
		jb.update(func() { jb.events = append(jb.events, ev) })
	}
	s.jobs.mu.Lock()
	s.jobs.byID[jb.j.ID] = jb
	s.pruneJobsLocked()
	s.jobs.mu.Unlock()
	s.jobs.wg.Add(1)
	go func() {
		defer s.jobs.wg.Done()
		defer cancel()
		recs, err := run(ctx, o)
		jb.update(func() {
			now := time.Now().UTC()
			jb.j.Ended = &now
			if recs != nil {
				jb.j.Records = recs
			}
			jb.j.State = JobDone
			if err != nil {
				body, _ := makeErrorBody(err)
				jb.j.State, jb.j.Error = JobFailed, &body.Error
			}
		})
		close(jb.done)
	}()
	j, _, _ := jb.snapshot()
	writeJSON(w, http.StatusCreated, j)
}

// pruneJobsLocked forgets the oldest finished jobs beyond maxJobs.
func (s *Server) pruneJobsLocked() {
	if len(s.jobs.byID) <= maxJobs {
		return
	}
	type aged struct {
		id string
		t  time.Time
	}
	var done []aged
	for id, jb := range s.jobs.byID {
		select {
		case <-jb.done:
			j, _, _ := jb.snapshot()
			done = append(done, aged{id, j.Started})
		default:
		}
	}
	sort.Slice(done, func(i, k int) bool { return done[i].t.Before(done[k].t) })
	for i := 0; i < len(done) && len(s.jobs.byID) > maxJobs; i++ {
		delete(s.jobs.byID, done[i].id)
	}
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	s.jobs.mu.Lock()
	all := make([]*job, 0, len(s.jobs.byID))
	for _, jb := range s.jobs.byID {
		all = append(all, jb)
	}
	s.jobs.mu.Unlock()
	out := make([]Job, 0, len(all))
	for _, jb := range all {
		j, _, _ := jb.snapshot()
		out = append(out, j)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Started.Before(out[k].Started) })
	writeJSON(w, http.StatusOK, out)
}

// getJob answers the job; with ?wait=SECONDS it first waits (long poll) up
// to that long for the job to end.
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	jb, err := s.lookupJob(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if ws := r.URL.Query().Get("wait"); ws != "" {
		secs, err := strconv.ParseFloat(ws, 64)
		if err != nil || secs < 0 {
			s.fail(w, r, fmt.Errorf("%w: wait=%q: want seconds", ErrBadRequest, ws))
			return
		}
		d := min(time.Duration(secs*float64(time.Second)), maxWait)
		t := time.NewTimer(d)
		select {
		case <-jb.done:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	j, _, _ := jb.snapshot()
	writeJSON(w, http.StatusOK, j)
}

// cancelJob ends a job: its running attempts are fenced and killed.
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	jb, err := s.lookupJob(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jb.cancel()
	select {
	case <-jb.done:
	case <-r.Context().Done():
	}
	j, _, _ := jb.snapshot()
	writeJSON(w, http.StatusOK, j)
}

// jobEvents streams the job's events as NDJSON, from its first, until it
// ends (a last event of kind "done" carries the job).
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request) {
	jb, err := s.lookupJob(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	sent := 0
	for {
		j, evs, changed := jb.snapshot()
		for _, ev := range evs[sent:] {
			if enc.Encode(JobEvent{Event: ev}) != nil {
				return
			}
		}
		sent = len(evs)
		if j.State != JobRunning {
			enc.Encode(JobEvent{Event: runner.Event{Time: time.Now().UTC(), Kind: "done"}, Job: &j})
			return
		}
		if fl != nil {
			fl.Flush()
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control/controltest"
)

// TestMain lets this test binary serve as the attempt helper.
func TestMain(m *testing.M) {
	attempt.RunHelper()
	os.Exit(m.Run())
}

// startJobServer serves a fake backend whose jobs run in plain
// directories.
func startJobServer(t *testing.T) (*controltest.Fake, *Client) {
	t.Helper()
	fb, c, _ := startJobServerIn(t)
	return fb, c
}

// startJobServerIn is startJobServer, also returning the store directory.
func startJobServerIn(t *testing.T) (*controltest.Fake, *Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fb := controltest.New()
	root := t.TempDir()
	ro := &runner.Options{
		Backend: fb, Store: dir, Grace: 50 * time.Millisecond, Poll: 10 * time.Millisecond,
		Flush: func(string) error { return nil },
		Workdir: func(b string) (string, error) {
			d := filepath.Join(root, b)
			return d, os.MkdirAll(d, 0o755)
		},
	}
	srv, err := NewServer(ServerOptions{Backend: fb, Runner: ro, Token: mustToken(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	c := NewClient(SocketPath(dir))
	t.Cleanup(c.Close)
	return fb, c, dir
}

func startJob(t *testing.T, c *Client, req JobRequest) Job {
	t.Helper()
	var j Job
	if err := c.do(context.Background(), http.MethodPost, "/v1/jobs", req, &j); err != nil {
		t.Fatal(err)
	}
	if j.ID == "" || j.State != JobRunning {
		t.Fatalf("new job %+v", j)
	}
	return j
}

func waitJob(t *testing.T, c *Client, id string) Job {
	t.Helper()
	for {
		var j Job
		if err := c.do(context.Background(), http.MethodGet, "/v1/jobs/"+id+"?wait=30", nil, &j); err != nil {
			t.Fatal(err)
		}
		if j.State != JobRunning {
			return j
		}
	}
}

func TestJobExecLongPoll(t *testing.T) {
	fb, c := startJobServer(t)
	if _, err := fb.Fork(context.Background(), "main", "b"); err != nil {
		t.Fatal(err)
	}
	j := startJob(t, c, JobRequest{Kind: JobExec, Branch: "b", OnExit: "commit", Argv: []string{"/bin/sh", "-c", "exit 3"}})
	j = waitJob(t, c, j.ID)
	if j.State != JobDone || len(j.Records) != 1 || j.Records[0].ExitCode != 3 || j.Records[0].State != branches.StateAborted {
		t.Fatalf("job %+v: want done, one record, exit 3, aborted", j)
	}
	var all []Job
	if err := c.do(context.Background(), http.MethodGet, "/v1/jobs", nil, &all); err != nil || len(all) != 1 || all[0].ID != j.ID {
		t.Fatalf("list: %v %+v", err, all)
	}
}

func TestJobRaceEvents(t *testing.T) {
	_, c := startJobServer(t)
	j := startJob(t, c, JobRequest{Kind: JobRace, Parent: "main", Cmds: [][]string{{"/bin/sh", "-c", "sleep 1000"}, {"true"}}})
	req, _ := http.NewRequest(http.MethodGet, "http://branchnfs/v1/jobs/"+j.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	kinds := map[string]int{}
	var last JobEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev JobEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		kinds[ev.Kind]++
		last = ev
	}
	if last.Kind != "done" || last.Job == nil || last.Job.State != JobDone {
		t.Fatalf("last event %+v: want done with the job", last)
	}
	if kinds["started"] != 2 || kinds["committed"] != 1 || kinds["ended"] != 2 {
		t.Fatalf("events by kind %v: want 2 started, 2 ended, 1 committed", kinds)
	}
	recs := last.Job.Records
	if recs[1].State != branches.StateCommitted || recs[0].KilledBy != runner.KilledBySibling {
		t.Fatalf("records %+v", recs)
	}
}

func TestJobCancel(t *testing.T) {
	fb, c := startJobServer(t)
	fb.Fork(context.Background(), "main", "b")
	j := startJob(t, c, JobRequest{Kind: JobExec, Branch: "b", Argv: []string{"sleep", "1000"}})
	if err := c.do(context.Background(), http.MethodDelete, "/v1/jobs/"+j.ID, nil, &j); err != nil {
		t.Fatal(err)
	}
	if j.State != JobDone || j.Records[0].KilledBy != runner.KilledByInterrupt || j.Records[0].State != branches.StateAborted {
		t.Fatalf("cancelled job %+v: want killed by interrupt, fenced (aborted)", j)
	}
}

func TestJobBadRequests(t *testing.T) {
	_, c := startJobServer(t)
	tooMany := make([][]string, MaxJobAttempts+1)
	for i := range tooMany {
		tooMany[i] = []string{"true"}
	}
	for _, req := range []JobRequest{
		{Kind: "dance"},
		{Kind: JobExec, Branch: "b"},
		{Kind: JobRace, Parent: "main"},
		{Kind: JobBestOf, Parent: "main", Argv: []string{"true"}},
		{Kind: JobBestOf, Parent: "main", N: MaxJobAttempts + 1, Argv: []string{"true"}},
		{Kind: JobRace, Parent: "main", N: MaxJobAttempts + 1, Argv: []string{"true"}},
		{Kind: JobRace, Parent: "main", Cmds: tooMany},
	} {
		err := c.do(context.Background(), http.MethodPost, "/v1/jobs", req, nil)
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: err %v, want bad_request", req, err)
		}
	}
	err := c.do(context.Background(), http.MethodPost, "/v1/jobs", JobRequest{Kind: JobExec, Branch: "nosuch", Argv: []string{"true"}}, nil)
	if !errors.Is(err, branches.ErrNotFound) {
		t.Errorf("exec in a missing branch: %v, want not_found", err)
	}
	err = c.do(context.Background(), http.MethodGet, "/v1/jobs/nosuch", nil, nil)
	if !errors.Is(err, branches.ErrNotFound) {
		t.Errorf("missing job: %v, want not_found", err)
	}
}

func TestJobsNeedRunner(t *testing.T) {
	_, c, _ := startServer(t)
	err := c.do(context.Background(), http.MethodPost, "/v1/jobs", JobRequest{Kind: JobExec, Branch: "main", Argv: []string{"true"}}, nil)
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("err %v, want bad_request (no runner)", err)
	}
}

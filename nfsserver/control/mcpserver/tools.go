package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func (t *tools) register(s *mcp.Server) {
	// Branches.
	addTool(s, "fork", "Fork a new branch from a parent branch (main, or another branch), optionally from one of the parent's checkpoints. The new branch starts as a copy-on-write copy of the parent.", t.fork)
	addTool(s, "list", "List the branches: name, parent, state (live, committed, aborted, invalidated), bytes changed, checkpoints, live children.", t.list)
	addTool(s, "diff", "Show what a branch changed since it was forked: each added, modified or deleted path. patch adds the changes as a git patch (git apply applies it to the fork base), cut at patch_limit bytes (patch_truncated says so); since makes the patch the changes since that checkpoint of the branch.", t.diff)
	addTool(s, "commit", "Commit a branch into its parent. Refused with conflict (and the paths) when the parent changed the same paths, has_children when it has live children, in_use when NFS clients use it (force overrides in_use).", t.commit)
	addTool(s, "abort", "Abort a branch (and its descendants): its changes are discarded.", t.abort)
	addTool(s, "checkpoint", "Freeze the current state of a branch under a label, to restore or fork from later.", t.checkpoint)
	addTool(s, "restore", "Roll a branch back to one of its checkpoints.", t.restore)
	addTool(s, "status", "The server's status (store, NFS address, mount, live branches) and, given a branch, that branch.", t.status)
	// Attempts, as jobs.
	addTool(s, "exec", "Start a command (argv, no shell unless you run sh -c) in a branch's directory of the server's mount, supervised, as a job; returns the job id. on_exit says what to do with the branch after: keep (default), commit (on exit 0, else abort) or abort. With wait_seconds it waits that long for the job, sending progress; cancelling the call then cancels the job. Runs as the store's owner.", t.exec)
	addTool(s, "race", "Start a race as a job: one attempt per command (cmds, or n copies of argv), each in its own child of parent; the first to exit 0 (and pass check) commits, the others are killed and aborted. Returns the job id; with wait_seconds it waits, sending progress; cancelling the call then cancels the job.", t.race)
	addTool(s, "best_of", "Start a best-of run as a job: n attempts of argv in children of parent, run to their end, scored (score_cmd's last printed number, else what the attempt wrote to fd 3, else 1 for exit 0); the best is committed unless keep or no_commit. Returns the job id; with wait_seconds it waits, sending progress; cancelling the call then cancels the job.", t.bestOf)
	addTool(s, "job_status", "A job's state (running, done, failed) and its attempts' records (outcome: won, lost, failed, timed_out, check_failed, interrupted). wait_seconds long-polls until the job ends or that time passes, sending progress.", t.jobStatus)
	addTool(s, "job_cancel", "Cancel a job: its running attempts are fenced (their branches aborted) and killed; returns the job once it ended.", t.jobCancel)
	// Files.
	addTool(s, "file_read", "Read a file of a branch: up to limit bytes (default 256 KiB) from offset. Text comes back as content, other bytes as content_base64.", t.fileRead)
	addTool(s, "file_write", "Create or replace a file of a branch with content (or content_base64), creating missing directories.", t.fileWrite)
	addTool(s, "file_edit", "Replace old_string by new_string in a file of a branch. old_string must occur exactly once (no_match if absent, not_unique if repeated) unless replace_all.", t.fileEdit)
	addTool(s, "file_list", "List a directory of a branch (default its root). glob keeps the paths below it that match, at any depth (\"*.go\" matches names, \"src/**/*.ts\" paths); recursive descends without a glob.", t.fileList)
	addTool(s, "file_search", "Search a branch's text files for a Go regular expression, line by line; glob filters the files, limit bounds the matches (default 100). Binary and files above 8 MiB are skipped.", t.fileSearch)
	addTool(s, "file_delete", "Delete a file, symlink or empty directory of a branch; recursive deletes a directory with its contents.", t.fileDelete)
	addTool(s, "file_move", "Move (rename) a file or directory of a branch, creating the destination's directories. An existing destination is refused unless overwrite.", t.fileMove)
}

// Branch is a branch as the tools report it.
type Branch struct {
	Name          string   `json:"name"`
	Parent        string   `json:"parent,omitempty"`
	State         string   `json:"state" jsonschema:"live, committed, aborted or invalidated"`
	ForkTime      string   `json:"fork_time,omitempty"`
	ForkedFrom    string   `json:"forked_from,omitempty" jsonschema:"the parent's checkpoint it was forked from"`
	InvalidatedBy string   `json:"invalidated_by,omitempty"`
	BytesChanged  int64    `json:"bytes_changed"`
	Depth         int      `json:"depth"`
	Checkpoints   []string `json:"checkpoints,omitempty"`
	Children      []string `json:"children,omitempty" jsonschema:"live children"`
}

func branchOf(in branches.Info) Branch {
	b := Branch{Name: in.Name, Parent: in.Parent, State: string(in.State), ForkedFrom: in.ForkedFrom, InvalidatedBy: in.InvalidatedBy,
		BytesChanged: in.BytesChanged, Depth: in.Depth, Checkpoints: in.Checkpoints, Children: in.Children}
	if !in.ForkTime.IsZero() {
		b.ForkTime = in.ForkTime.UTC().Format(time.RFC3339Nano)
	}
	return b
}

type ForkIn struct {
	Parent     string `json:"parent" jsonschema:"the branch to fork, e.g. main"`
	Name       string `json:"name" jsonschema:"the new branch's name: 1 to 64 of A-Z a-z 0-9 . _ -"`
	Checkpoint string `json:"checkpoint,omitempty" jsonschema:"fork from this checkpoint of the parent instead of its current state"`
}

type ForkOut struct {
	Branch Branch `json:"branch"`
	Export string `json:"export" jsonschema:"the branch's NFS export path, and its directory in a mount of /"`
}

func (t *tools) fork(ctx context.Context, _ *mcp.CallToolRequest, in ForkIn) (ForkOut, string, error) {
	var info branches.Info
	var err error
	if in.Checkpoint != "" {
		info, err = t.c.ForkCheckpoint(ctx, in.Parent, in.Checkpoint, in.Name)
	} else {
		info, err = t.c.Fork(ctx, in.Parent, in.Name)
	}
	if err != nil {
		return ForkOut{}, "", err
	}
	return ForkOut{Branch: branchOf(info), Export: control.ExportPath(info.Name)},
		fmt.Sprintf("forked %s from %s", info.Name, info.Parent), nil
}

type ListIn struct {
	State string `json:"state,omitempty" jsonschema:"only branches in this state (live, committed, aborted, invalidated); default all"`
}

type ListOut struct {
	Branches []Branch `json:"branches"`
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, in ListIn) (ListOut, string, error) {
	infos, err := t.c.List(ctx)
	if err != nil {
		return ListOut{}, "", err
	}
	out := ListOut{Branches: []Branch{}}
	var names []string
	for _, info := range infos {
		if in.State != "" && string(info.State) != in.State {
			continue
		}
		out.Branches = append(out.Branches, branchOf(info))
		names = append(names, info.Name+" ("+string(info.State)+")")
	}
	return out, plural(len(out.Branches), "branch", "branches") + ": " + strings.Join(names, ", "), nil
}

type BranchIn struct {
	Branch string `json:"branch" jsonschema:"the branch's name"`
}

// Change is one changed path of a diff.
type Change struct {
	Path  string `json:"path"`
	Kind  string `json:"kind" jsonschema:"added, modified or deleted"`
	Type  string `json:"type" jsonschema:"file, dir, symlink, ..."`
	Bytes int64  `json:"bytes"`
}

type DiffIn struct {
	Branch     string `json:"branch" jsonschema:"the branch's name"`
	Patch      bool   `json:"patch,omitempty" jsonschema:"also return the changes as a git patch (diff --git, modes, symlinks, binary files as git binary patches; .git left out)"`
	Since      string `json:"since,omitempty" jsonschema:"with patch: the patch holds the changes since this checkpoint of the branch instead of since its fork (changes still lists those since the fork)"`
	PatchLimit int    `json:"patch_limit,omitempty" jsonschema:"the most bytes of patch returned (default 256 KiB, at most 4 MiB); a longer patch is cut at a line's end and patch_truncated is set"`
}

type DiffOut struct {
	Branch   string   `json:"branch"`
	Parent   string   `json:"parent,omitempty"`
	Changes  []Change `json:"changes"`
	Added    int      `json:"added"`
	Modified int      `json:"modified"`
	Deleted  int      `json:"deleted"`
	// The patch, when asked.
	Since          string `json:"since,omitempty" jsonschema:"the checkpoint the patch starts from"`
	Patch          string `json:"patch,omitempty" jsonschema:"the git patch, when it is valid UTF-8"`
	PatchBase64    string `json:"patch_base64,omitempty" jsonschema:"the git patch, base64, when it is not valid UTF-8 (text in another encoding)"`
	PatchTruncated bool   `json:"patch_truncated,omitempty" jsonschema:"the patch was longer than patch_limit and is cut: use since, or the CLI (branchnfs diff NAME --patch), for the rest"`
}

// errPatchFull stops a patch's stream once its bound is reached.
var errPatchFull = errors.New("mcpserver: the patch reached its bound")

// boundedBuffer keeps the first max bytes written to it, then fails
// with errPatchFull.
type boundedBuffer struct {
	buf  bytes.Buffer
	max  int
	full bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:room])
		b.full = true
		return room, errPatchFull
	}
	return b.buf.Write(p)
}

// patch returns branch's git patch (since its checkpoint since, if set),
// at most limit bytes; a cut patch ends at a line's end.
func (t *tools) patch(ctx context.Context, branch, since string, limit int) (patch []byte, truncated bool, err error) {
	switch {
	case limit == 0:
		limit = control.DefaultReadLimit
	case limit < 0 || limit > control.MaxReadLimit:
		return nil, false, fmt.Errorf("%w: patch_limit %d: give 1 to %d bytes", control.ErrBadRequest, limit, control.MaxReadLimit)
	}
	// One byte more than the bound tells a patch of exactly limit bytes
	// from a longer one.
	b := &boundedBuffer{max: limit + 1}
	if _, err := t.c.Patch(ctx, branch, since, b); err != nil && !(b.full && errors.Is(err, errPatchFull)) {
		return nil, false, err
	}
	patch = b.buf.Bytes()
	if len(patch) <= limit {
		return patch, false, nil
	}
	patch = patch[:limit]
	if i := bytes.LastIndexByte(patch, '\n'); i >= 0 {
		patch = patch[:i+1]
	}
	return patch, true, nil
}

func (t *tools) diff(ctx context.Context, _ *mcp.CallToolRequest, in DiffIn) (DiffOut, string, error) {
	if !in.Patch && (in.Since != "" || in.PatchLimit != 0) {
		return DiffOut{}, "", fmt.Errorf("%w: since and patch_limit are for the patch: set patch to true", control.ErrBadRequest)
	}
	d, err := t.c.Diff(ctx, in.Branch)
	if err != nil {
		return DiffOut{}, "", err
	}
	out := DiffOut{Branch: d.Branch, Parent: d.Parent, Changes: []Change{}}
	var lines []string
	for _, c := range d.Changes {
		out.Changes = append(out.Changes, Change{Path: c.Path, Kind: string(c.Kind), Type: c.Type, Bytes: c.Bytes})
		switch c.Kind {
		case branches.Added:
			out.Added++
		case branches.Modified:
			out.Modified++
		case branches.Deleted:
			out.Deleted++
		}
		if len(lines) < 50 {
			lines = append(lines, string(c.Kind[0]-'a'+'A')+" "+c.Path)
		}
	}
	text := fmt.Sprintf("%s since its fork from %s: %d added, %d modified, %d deleted", d.Branch, d.Parent, out.Added, out.Modified, out.Deleted)
	if len(lines) > 0 {
		text += "\n" + strings.Join(lines, "\n")
		if len(d.Changes) > len(lines) {
			text += fmt.Sprintf("\n... and %d more", len(d.Changes)-len(lines))
		}
	}
	if !in.Patch {
		return out, text, nil
	}
	patch, truncated, err := t.patch(ctx, in.Branch, in.Since, in.PatchLimit)
	if err != nil {
		return DiffOut{}, "", err
	}
	out.Since, out.PatchTruncated = in.Since, truncated
	what := "patch since the fork"
	if in.Since != "" {
		what = "patch since checkpoint " + in.Since
	}
	if truncated {
		what += fmt.Sprintf(", cut at %d bytes (patch_truncated)", len(patch))
	}
	if utf8.Valid(patch) {
		out.Patch = string(patch)
		text += "\n\n" + what + ":\n" + out.Patch
	} else {
		out.PatchBase64 = base64.StdEncoding.EncodeToString(patch)
		text += "\n\n" + what + ": not UTF-8, in patch_base64"
	}
	return out, text, nil
}

type ChangeIn struct {
	Branch string `json:"branch" jsonschema:"the branch's name"`
	Force  bool   `json:"force,omitempty" jsonschema:"commit or abort even if NFS clients use the branch"`
}

type CommitOut struct {
	Branch      string   `json:"branch"`
	Parent      string   `json:"parent"`
	FastPath    bool     `json:"fast_path" jsonschema:"the parent had not changed: the commit swapped a pointer"`
	Changes     int      `json:"changes" jsonschema:"the changes the commit brought into the parent, as diff counts them (taken just before the commit)"`
	MergedPaths int      `json:"merged_paths" jsonschema:"the directory entries and files a merge applied; 0 on the fast path, which swaps a pointer"`
	Invalidated []string `json:"invalidated,omitempty" jsonschema:"siblings invalidated by the commit"`
}

func (t *tools) commit(ctx context.Context, _ *mcp.CallToolRequest, in ChangeIn) (CommitOut, string, error) {
	// What the commit brings in, as the diff counts it: the fast path
	// itself does not look (it stays O(1)).
	var changes int
	if d, err := t.c.Diff(ctx, in.Branch); err == nil {
		changes = len(d.Changes)
	}
	commit := t.c.Commit
	if in.Force {
		commit = t.c.ForceCommit
	}
	res, err := commit(ctx, in.Branch)
	if err != nil {
		return CommitOut{}, "", err
	}
	// The diff's count on either path: after a merge, res.Changes counts
	// merged paths (MergedPaths).
	res.Changes = changes
	text := fmt.Sprintf("committed %s into %s (%s)", res.Branch, res.Parent, plural(res.Changes, "change", "changes"))
	if len(res.Invalidated) > 0 {
		text += "; invalidated " + strings.Join(res.Invalidated, ", ")
	}
	return CommitOut{Branch: res.Branch, Parent: res.Parent, FastPath: res.FastPath, Changes: res.Changes, MergedPaths: res.MergedPaths, Invalidated: res.Invalidated}, text, nil
}

type AbortOut struct {
	Aborted []string `json:"aborted" jsonschema:"the branch and its descendants"`
}

func (t *tools) abort(ctx context.Context, _ *mcp.CallToolRequest, in ChangeIn) (AbortOut, string, error) {
	abort := t.c.Abort
	if in.Force {
		abort = t.c.ForceAbort
	}
	res, err := abort(ctx, in.Branch)
	if err != nil {
		return AbortOut{}, "", err
	}
	if res.Aborted == nil {
		res.Aborted = []string{}
	}
	return AbortOut{Aborted: res.Aborted}, "aborted " + strings.Join(res.Aborted, ", "), nil
}

type LabelIn struct {
	Branch string `json:"branch" jsonschema:"the branch's name"`
	Label  string `json:"label" jsonschema:"the checkpoint's label"`
}

type CheckpointOut struct {
	Branch string `json:"branch"`
	Label  string `json:"label"`
	Time   string `json:"time"`
}

func (t *tools) checkpoint(ctx context.Context, _ *mcp.CallToolRequest, in LabelIn) (CheckpointOut, string, error) {
	cp, err := t.c.Checkpoint(ctx, in.Branch, in.Label)
	if err != nil {
		return CheckpointOut{}, "", err
	}
	return CheckpointOut{Branch: cp.Branch, Label: cp.Label, Time: cp.Time.UTC().Format(time.RFC3339Nano)},
		fmt.Sprintf("checkpoint %s of %s", cp.Label, cp.Branch), nil
}

type RestoreOut struct {
	Branch string `json:"branch"`
	Label  string `json:"label"`
}

func (t *tools) restore(ctx context.Context, _ *mcp.CallToolRequest, in LabelIn) (RestoreOut, string, error) {
	if err := t.c.Restore(ctx, in.Branch, in.Label); err != nil {
		return RestoreOut{}, "", err
	}
	return RestoreOut{Branch: in.Branch, Label: in.Label}, fmt.Sprintf("restored %s to checkpoint %s", in.Branch, in.Label), nil
}

type StatusIn struct {
	Branch string `json:"branch,omitempty" jsonschema:"also report this branch"`
}

type StatusOut struct {
	Mode         string  `json:"mode" jsonschema:"server: a branchnfs server runs; direct: this MCP server opened the store itself"`
	Version      string  `json:"version"`
	Store        string  `json:"store,omitempty"`
	Listen       string  `json:"listen,omitempty" jsonschema:"the NFS address"`
	Mount        string  `json:"mount,omitempty" jsonschema:"where the server mounted the export /; attempts run in MOUNT/BRANCH"`
	LiveBranches int     `json:"live_branches"`
	Branch       *Branch `json:"branch,omitempty"`
}

func (t *tools) status(ctx context.Context, _ *mcp.CallToolRequest, in StatusIn) (StatusOut, string, error) {
	st, err := t.c.Status(ctx)
	if err != nil {
		return StatusOut{}, "", err
	}
	out := StatusOut{Mode: t.mode, Version: st.Version, Store: st.Store, Listen: st.Listen, Mount: st.Mount, LiveBranches: st.LiveBranches}
	text := fmt.Sprintf("branchnfs %s (%s) on store %s: %s", st.Version, t.mode, st.Store, plural(st.LiveBranches, "live branch", "live branches"))
	if st.Mount != "" {
		text += ", mounted at " + st.Mount
	}
	if in.Branch != "" {
		info, err := t.c.Get(ctx, in.Branch)
		if err != nil {
			return StatusOut{}, "", err
		}
		b := branchOf(info)
		out.Branch = &b
		text += fmt.Sprintf("; %s is %s, forked from %s, %d bytes changed", b.Name, b.State, b.Parent, b.BytesChanged)
	}
	return out, text, nil
}

// Jobs.

// JobOut is a job as the tools report it.
type JobOut struct {
	ID      string          `json:"id"`
	Kind    string          `json:"kind" jsonschema:"exec, race or best_of"`
	State   string          `json:"state" jsonschema:"running, done (see records) or failed (see error)"`
	Started string          `json:"started"`
	Ended   string          `json:"ended,omitempty"`
	Winner  string          `json:"winner,omitempty" jsonschema:"race, best_of: the branch of the attempt that won (committed; with keep, the first kept)"`
	Records []runner.Record `json:"records"`
	Error   *ToolError      `json:"error,omitempty"`
}

func jobOf(j control.Job) JobOut {
	out := JobOut{ID: j.ID, Kind: j.Kind, State: j.State, Started: j.Started.UTC().Format(time.RFC3339Nano), Records: j.Records}
	if out.Records == nil {
		out.Records = []runner.Record{}
	}
	if j.Ended != nil {
		out.Ended = j.Ended.UTC().Format(time.RFC3339Nano)
	}
	for _, r := range j.Records {
		if out.Winner == "" && j.Kind != control.JobExec && (r.Outcome == runner.OutcomeWon || r.State == branches.StateCommitted) {
			out.Winner = r.Branch
		}
	}
	if j.Error != nil {
		code, detail := j.Error.Code, j.Error.Paths
		out.Error = &ToolError{Code: code, Message: j.Error.Message, Detail: detail}
	}
	return out
}

func jobText(j JobOut) string {
	s := fmt.Sprintf("job %s (%s) %s", j.ID, j.Kind, j.State)
	if j.Winner != "" {
		s += ", winner " + j.Winner
	}
	if j.Error != nil {
		s += ": " + j.Error.Error()
	}
	for _, r := range j.Records {
		line := fmt.Sprintf("\n%s: %s, exit %d, branch %s", r.Branch, r.Outcome, r.ExitCode, r.State)
		if r.Error != "" {
			line += ": " + r.Error
		}
		s += line
	}
	return s
}

type Limits struct {
	TimeoutMS   int64   `json:"timeout_ms,omitempty" jsonschema:"kill an attempt after this many milliseconds (default one hour; -1: no bound)"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds for the job to end, sending progress; 0 returns at once"`
}

type ExecIn struct {
	Branch string   `json:"branch" jsonschema:"the branch to run in"`
	Argv   []string `json:"argv" jsonschema:"the command and its arguments, e.g. [\"make\", \"test\"] or [\"sh\", \"-c\", \"go test ./...\"]"`
	OnExit string   `json:"on_exit,omitempty" jsonschema:"keep (default), commit (on exit 0, else abort) or abort"`
	Limits
}

func (t *tools) exec(ctx context.Context, req *mcp.CallToolRequest, in ExecIn) (JobOut, string, error) {
	return t.startJob(ctx, req, control.JobRequest{Kind: control.JobExec, Branch: in.Branch, Argv: in.Argv, OnExit: in.OnExit, TimeoutMS: in.TimeoutMS}, in.WaitSeconds, 1)
}

type RaceIn struct {
	Parent string     `json:"parent" jsonschema:"the branch every attempt is forked from"`
	Cmds   [][]string `json:"cmds,omitempty" jsonschema:"one argv per attempt"`
	Argv   []string   `json:"argv,omitempty" jsonschema:"with n: the command every attempt runs"`
	N      int        `json:"n,omitempty" jsonschema:"with argv: the number of attempts"`
	Check  []string   `json:"check,omitempty" jsonschema:"run in an attempt's branch after it exits 0; it wins only if this exits 0 too"`
	Limits
}

func (t *tools) race(ctx context.Context, req *mcp.CallToolRequest, in RaceIn) (JobOut, string, error) {
	n := len(in.Cmds)
	if n == 0 {
		n = in.N
	}
	return t.startJob(ctx, req, control.JobRequest{Kind: control.JobRace, Parent: in.Parent, Cmds: in.Cmds, Argv: in.Argv, N: in.N, Check: in.Check, TimeoutMS: in.TimeoutMS}, in.WaitSeconds, n)
}

type BestOfIn struct {
	Parent   string   `json:"parent" jsonschema:"the branch every attempt is forked from"`
	N        int      `json:"n" jsonschema:"the number of attempts"`
	Argv     []string `json:"argv" jsonschema:"the command every attempt runs"`
	ScoreCmd []string `json:"score_cmd,omitempty" jsonschema:"run in each attempt's branch after it ends; the last number it prints is the score"`
	Keep     int      `json:"keep,omitempty" jsonschema:"keep the best K attempts live and commit none"`
	NoCommit bool     `json:"no_commit,omitempty" jsonschema:"score every attempt, commit none"`
	Limits
}

func (t *tools) bestOf(ctx context.Context, req *mcp.CallToolRequest, in BestOfIn) (JobOut, string, error) {
	return t.startJob(ctx, req, control.JobRequest{Kind: control.JobBestOf, Parent: in.Parent, N: in.N, Argv: in.Argv, ScoreCmd: in.ScoreCmd, Keep: in.Keep, NoCommit: in.NoCommit, TimeoutMS: in.TimeoutMS}, in.WaitSeconds, in.N)
}

func (t *tools) startJob(ctx context.Context, req *mcp.CallToolRequest, jr control.JobRequest, wait float64, attempts int) (JobOut, string, error) {
	j, err := t.c.StartJob(ctx, jr)
	if err != nil {
		return JobOut{}, "", err
	}
	if wait > 0 {
		// A blocking call: cancelling it cancels the job.
		if j, err = t.wait(ctx, req, j.ID, wait, attempts, true); err != nil {
			return JobOut{}, "", err
		}
	}
	out := jobOf(j)
	return out, jobText(out), nil
}

type JobIn struct {
	JobID       string  `json:"job_id" jsonschema:"the job's id"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 600) for the job to end, sending progress; 0 answers at once"`
}

func (t *tools) jobStatus(ctx context.Context, req *mcp.CallToolRequest, in JobIn) (JobOut, string, error) {
	j, err := t.wait(ctx, req, in.JobID, in.WaitSeconds, 0, false)
	if err != nil {
		return JobOut{}, "", err
	}
	out := jobOf(j)
	return out, jobText(out), nil
}

type CancelIn struct {
	JobID string `json:"job_id" jsonschema:"the job's id"`
}

func (t *tools) jobCancel(ctx context.Context, _ *mcp.CallToolRequest, in CancelIn) (JobOut, string, error) {
	j, err := t.c.CancelJob(ctx, in.JobID)
	if err != nil {
		return JobOut{}, "", err
	}
	out := jobOf(j)
	return out, jobText(out), nil
}

// wait long-polls job id for up to wait seconds, sending a progress
// notification for each of its events when the call asked for progress.
// If the call is cancelled meanwhile and cancelJob is set, the job is
// cancelled too.
func (t *tools) wait(ctx context.Context, req *mcp.CallToolRequest, id string, wait float64, attempts int, cancelJob bool) (control.Job, error) {
	if wait <= 0 {
		return t.c.GetJob(ctx, id, 0)
	}
	d := time.Duration(min(wait, 600) * float64(time.Second))
	evctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		go func() {
			defer close(done)
			n := 0
			t.c.JobEvents(evctx, id, func(ev control.JobEvent) {
				n++
				p := &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(n), Message: eventText(ev)}
				if attempts > 0 {
					// Each attempt has at least a start and an end.
					p.Total = float64(max(2*attempts+1, n))
				}
				req.Session.NotifyProgress(evctx, p)
			})
		}()
	} else {
		close(done)
	}
	j, err := t.c.GetJob(ctx, id, d)
	if err == nil && j.State != control.JobRunning {
		// The event stream ends with the job: let its last events out
		// before the result.
		t := time.NewTimer(5 * time.Second)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	stop()
	<-done
	if ctx.Err() != nil && cancelJob {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		t.c.CancelJob(cctx, id)
		return control.Job{}, fmt.Errorf("job %s cancelled with the call: %w", id, ctx.Err())
	}
	return j, err
}

func eventText(ev control.JobEvent) string {
	switch {
	case ev.Kind == "done" && ev.Job != nil:
		return "job " + ev.Job.State
	case ev.Kind == "started":
		return fmt.Sprintf("%s started (pid %d)", ev.Branch, ev.PID)
	case ev.Record != nil:
		return fmt.Sprintf("%s %s: exit %d", ev.Branch, ev.Kind, ev.Record.ExitCode)
	}
	return ev.Branch + " " + ev.Kind
}

// Files.

type FileReadIn struct {
	Branch string `json:"branch" jsonschema:"the branch"`
	Path   string `json:"path" jsonschema:"the file, relative to the branch's root"`
	Offset int64  `json:"offset,omitempty" jsonschema:"the first byte to read"`
	Limit  int64  `json:"limit,omitempty" jsonschema:"the most bytes to read (default 262144, at most 4194304)"`
}

func (t *tools) fileRead(ctx context.Context, _ *mcp.CallToolRequest, in FileReadIn) (control.FileReadResult, string, error) {
	r, err := t.c.ReadFile(ctx, in.Branch, control.FileReadRequest{Path: in.Path, Offset: in.Offset, Limit: in.Limit})
	if err != nil {
		return r, "", err
	}
	text := r.Content
	if r.ContentBase64 != "" {
		text = fmt.Sprintf("%s: %d bytes of binary data (in content_base64)", r.Path, r.Bytes)
	}
	if !r.EOF {
		text += fmt.Sprintf("\n[%d of %d bytes from offset %d; read on from offset %d]", r.Bytes, r.Size, r.Offset, r.Offset+int64(r.Bytes))
	}
	return r, text, nil
}

type FileWriteIn struct {
	Branch        string  `json:"branch" jsonschema:"the branch"`
	Path          string  `json:"path" jsonschema:"the file, relative to the branch's root"`
	Content       string  `json:"content,omitempty" jsonschema:"the file's new content (text)"`
	ContentBase64 string  `json:"content_base64,omitempty" jsonschema:"the file's new content, base64 (instead of content)"`
	Mode          *uint32 `json:"mode,omitempty" jsonschema:"permission bits as a number, e.g. 493 for 0755 (default 420, 0644, for a new file)"`
}

func (t *tools) fileWrite(ctx context.Context, _ *mcp.CallToolRequest, in FileWriteIn) (control.FileWriteResult, string, error) {
	r, err := t.c.WriteFile(ctx, in.Branch, control.FileWriteRequest{Path: in.Path, Content: in.Content, ContentBase64: in.ContentBase64, Mode: in.Mode})
	if err != nil {
		return r, "", err
	}
	verb := "replaced"
	if r.Created {
		verb = "created"
	}
	return r, fmt.Sprintf("%s %s in %s (%d bytes)", verb, r.Path, in.Branch, r.Bytes), nil
}

type FileEditIn struct {
	Branch     string `json:"branch" jsonschema:"the branch"`
	Path       string `json:"path" jsonschema:"the file, relative to the branch's root"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, whitespace included"`
	NewString  string `json:"new_string" jsonschema:"the text to put instead"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of requiring exactly one"`
}

func (t *tools) fileEdit(ctx context.Context, _ *mcp.CallToolRequest, in FileEditIn) (control.FileEditResult, string, error) {
	r, err := t.c.EditFile(ctx, in.Branch, control.FileEditRequest{Path: in.Path, OldString: in.OldString, NewString: in.NewString, ReplaceAll: in.ReplaceAll})
	if err != nil {
		return r, "", err
	}
	return r, fmt.Sprintf("edited %s in %s: %s", r.Path, in.Branch, plural(r.Replacements, "replacement", "replacements")), nil
}

type FileListIn struct {
	Branch    string `json:"branch" jsonschema:"the branch"`
	Path      string `json:"path,omitempty" jsonschema:"the directory, relative to the branch's root (default the root)"`
	Glob      string `json:"glob,omitempty" jsonschema:"keep paths matching this glob: *.go matches at any depth; with / or ** it matches the path below the directory"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"descend into subdirectories"`
	Limit     int    `json:"limit,omitempty" jsonschema:"the most entries (default 1000)"`
}

func (t *tools) fileList(ctx context.Context, _ *mcp.CallToolRequest, in FileListIn) (control.FileListResult, string, error) {
	r, err := t.c.ListFiles(ctx, in.Branch, control.FileListRequest{Path: in.Path, Glob: in.Glob, Recursive: in.Recursive, Limit: in.Limit})
	if err != nil {
		return r, "", err
	}
	var b strings.Builder
	for _, e := range r.Entries {
		switch e.Type {
		case "dir":
			fmt.Fprintf(&b, "%s/\n", e.Path)
		case "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", e.Path, e.Target)
		default:
			fmt.Fprintf(&b, "%s (%d bytes)\n", e.Path, e.Size)
		}
	}
	if r.Truncated {
		b.WriteString("[truncated: raise limit or narrow the glob]\n")
	}
	if len(r.Entries) == 0 {
		b.WriteString("no entries\n")
	}
	return r, strings.TrimSuffix(b.String(), "\n"), nil
}

type FileSearchIn struct {
	Branch  string `json:"branch" jsonschema:"the branch"`
	Pattern string `json:"pattern" jsonschema:"a Go (RE2) regular expression, matched against each line"`
	Path    string `json:"path,omitempty" jsonschema:"search under this directory (default the root)"`
	Glob    string `json:"glob,omitempty" jsonschema:"only files matching this glob, e.g. *.go"`
	Limit   int    `json:"limit,omitempty" jsonschema:"the most matches (default 100)"`
}

func (t *tools) fileSearch(ctx context.Context, _ *mcp.CallToolRequest, in FileSearchIn) (control.FileSearchResult, string, error) {
	r, err := t.c.SearchFiles(ctx, in.Branch, control.FileSearchRequest{Pattern: in.Pattern, Path: in.Path, Glob: in.Glob, Limit: in.Limit})
	if err != nil {
		return r, "", err
	}
	var b strings.Builder
	for _, m := range r.Matches {
		fmt.Fprintf(&b, "%s:%d: %s\n", m.Path, m.Line, m.Text)
	}
	fmt.Fprintf(&b, "%s in %s", plural(len(r.Matches), "match", "matches"), plural(r.FilesScanned, "file", "files"))
	if r.Truncated {
		b.WriteString(" (truncated: raise limit)")
	}
	return r, b.String(), nil
}

type FileDeleteIn struct {
	Branch    string `json:"branch" jsonschema:"the branch"`
	Path      string `json:"path" jsonschema:"the file or directory, relative to the branch's root"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"delete a directory with its contents"`
}

func (t *tools) fileDelete(ctx context.Context, _ *mcp.CallToolRequest, in FileDeleteIn) (control.FileDeleteResult, string, error) {
	r, err := t.c.DeleteFile(ctx, in.Branch, control.FileDeleteRequest{Path: in.Path, Recursive: in.Recursive})
	if err != nil {
		return r, "", err
	}
	return r, fmt.Sprintf("deleted %s in %s (%s)", r.Path, in.Branch, plural(r.Removed, "entry", "entries")), nil
}

type FileMoveIn struct {
	Branch    string `json:"branch" jsonschema:"the branch"`
	From      string `json:"from" jsonschema:"the path to move"`
	To        string `json:"to" jsonschema:"its new path"`
	Overwrite bool   `json:"overwrite,omitempty" jsonschema:"replace an existing destination"`
}

func (t *tools) fileMove(ctx context.Context, _ *mcp.CallToolRequest, in FileMoveIn) (control.FileMoveResult, string, error) {
	r, err := t.c.MoveFile(ctx, in.Branch, control.FileMoveRequest{From: in.From, To: in.To, Overwrite: in.Overwrite})
	if err != nil {
		return r, "", err
	}
	return r, fmt.Sprintf("moved %s to %s in %s", r.From, r.To, in.Branch), nil
}

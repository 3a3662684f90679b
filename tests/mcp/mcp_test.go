// Package mcpe2e tests `branchnfs mcp` with real MCP clients: the Go SDK's
// own client over the command transport, and the MCP inspector's CLI
// (npm), each driving the built binary as a regular user.
package mcpe2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var bin string

func TestMain(m *testing.M) { os.Exit(testbin.Main(m, &bin)) }

// regular is the user the tests run branchnfs as: uid 1000 when they run
// as root, else the user running them.
var regular = func() testbin.User {
	if os.Geteuid() == 0 {
		return testbin.User{UID: 1000, GID: 1000, Groups: []uint32{1000}}
	}
	return testbin.Current()
}()

// newStore makes a store owned by the regular user, whose main holds a
// small workspace with a symlink to /etc, and returns its path and a
// directory for attempts.
func newStore(t testing.TB) (store, workdirs string) {
	t.Helper()
	dir := testbin.SharedTempDir(t, "bnfs-mcp")
	src := filepath.Join(dir, "src")
	for p, content := range map[string]string{
		"src/main.go":  "package main\n\nfunc main() { println(\"hello\") }\n",
		"src/util.go":  "package main\n\n// TODO: more\nfunc util() {}\n",
		"README.md":    "# demo\n",
		"data/bin.dat": "\x00\x01\x02binary",
	} {
		p = filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(src, "etc")); err != nil {
		t.Fatal(err)
	}
	store, workdirs = filepath.Join(dir, "store"), filepath.Join(dir, "work")
	if err := os.MkdirAll(workdirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		for _, p := range []string{dir, workdirs} {
			if err := os.Chown(p, int(regular.UID), int(regular.GID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if code, _, stderr := testbin.Run(t, bin, regular, "init", "--store", store, "--from", src); code != 0 {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	return store, workdirs
}

// session runs `branchnfs mcp` as the regular user and connects the SDK's
// client to it. progress receives the progress notifications.
func session(t testing.TB, store string, progress func(*mcp.ProgressNotificationParams), extra ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mcp", "--store", store}, extra...)...)
	regular.Apply(cmd)
	stderr := &testbin.SyncBuffer{}
	cmd.Stderr = stderr
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress(r.Params) }
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "branchnfs-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to branchnfs mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("branchnfs mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// call calls a tool and decodes its structured content into out (if not
// nil); it fails the test on a tool error.
func call(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res := callRaw(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", name, args, text(res))
	}
	if len(res.Content) == 0 || text(res) == "" {
		t.Fatalf("%s: no text content", name)
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

func callRaw(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error: %v", name, args, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// wantError calls a tool that must fail with code, and returns the
// error's details from _meta.
func wantError(t *testing.T, cs *mcp.ClientSession, code, name string, args map[string]any) map[string]any {
	t.Helper()
	res := callRaw(t, cs, name, args)
	if !res.IsError {
		t.Fatalf("%s %v: succeeded (%s), want error %s", name, args, text(res), code)
	}
	if !strings.HasPrefix(text(res), code+": ") {
		t.Fatalf("%s %v: error %q, want code %s", name, args, text(res), code)
	}
	m, _ := res.Meta["branchnfs/error"].(map[string]any)
	if m == nil || m["code"] != code {
		t.Fatalf("%s %v: _meta %v, want branchnfs/error with code %s", name, args, res.Meta, code)
	}
	return m
}

var allTools = []string{
	"fork", "list", "diff", "commit", "abort", "checkpoint", "restore", "status",
	"exec", "race", "best_of", "job_status", "job_cancel",
	"file_read", "file_write", "file_edit", "file_list", "file_search", "file_delete", "file_move",
}

func TestToolsHaveSchemas(t *testing.T) {
	store, _ := newStore(t)
	cs := session(t, store, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s: input schema %v, output schema %v, description %q", tool.Name, tool.InputSchema != nil, tool.OutputSchema != nil, tool.Description)
		}
	}
	slices.Sort(names)
	want := slices.Clone(allTools)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

func TestBranchAndFileTools(t *testing.T) {
	store, _ := newStore(t)
	cs := session(t, store, nil)
	var st struct {
		Mode string `json:"mode"`
	}
	call(t, cs, "status", nil, &st)
	if st.Mode != "direct" {
		t.Fatalf("status mode %q, want direct (no server runs)", st.Mode)
	}
	var fork struct {
		Branch struct{ Name, Parent, State string } `json:"branch"`
		Export string                               `json:"export"`
	}
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "feature"}, &fork)
	if fork.Branch.Name != "feature" || fork.Branch.Parent != "main" || fork.Branch.State != "live" || fork.Export != "/feature" {
		t.Fatalf("fork: %+v", fork)
	}

	// Files.
	var rd control.FileReadResult
	call(t, cs, "file_read", map[string]any{"branch": "feature", "path": "src/main.go", "offset": 14, "limit": 4}, &rd)
	if rd.Content != "func" || rd.EOF || rd.Size != 47 {
		t.Fatalf("file_read with offset and limit: %+v", rd)
	}
	var wr control.FileWriteResult
	call(t, cs, "file_write", map[string]any{"branch": "feature", "path": "pkg/new/new.go", "content": "package new\n\nconst X = 1\n"}, &wr)
	if !wr.Created || wr.Bytes != 25 {
		t.Fatalf("file_write: %+v", wr)
	}
	call(t, cs, "file_write", map[string]any{"branch": "feature", "path": "README.md", "content": "# demo\n\nmore\n"}, &wr)
	if wr.Created {
		t.Fatalf("file_write of an existing file says created")
	}
	var ed control.FileEditResult
	call(t, cs, "file_edit", map[string]any{"branch": "feature", "path": "src/main.go", "old_string": `println("hello")`, "new_string": `println("bye")`}, &ed)
	if ed.Replacements != 1 {
		t.Fatalf("file_edit: %+v", ed)
	}
	call(t, cs, "file_read", map[string]any{"branch": "feature", "path": "src/main.go"}, &rd)
	if !strings.Contains(rd.Content, `println("bye")`) || !rd.EOF {
		t.Fatalf("file_read after the edit: %+v", rd)
	}
	var ls control.FileListResult
	call(t, cs, "file_list", map[string]any{"branch": "feature", "glob": "*.go"}, &ls)
	var paths []string
	for _, e := range ls.Entries {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, " ") != "pkg/new/new.go src/main.go src/util.go" {
		t.Fatalf("file_list *.go: %v", paths)
	}
	call(t, cs, "file_list", map[string]any{"branch": "feature"}, &ls)
	var top []string
	for _, e := range ls.Entries {
		top = append(top, e.Path+":"+e.Type)
	}
	if strings.Join(top, " ") != "README.md:file data:dir etc:symlink pkg:dir src:dir" {
		t.Fatalf("file_list of the root: %v", top)
	}
	var se control.FileSearchResult
	call(t, cs, "file_search", map[string]any{"branch": "feature", "pattern": `TODO|bye`}, &se)
	if len(se.Matches) != 2 || se.Matches[0].Path != "src/main.go" || se.Matches[1].Line != 3 || se.FilesSkipped != 1 {
		t.Fatalf("file_search: %+v", se)
	}
	call(t, cs, "file_search", map[string]any{"branch": "feature", "pattern": `.`, "limit": 1}, &se)
	if len(se.Matches) != 1 || !se.Truncated {
		t.Fatalf("file_search with limit 1: %+v", se)
	}
	var mv control.FileMoveResult
	call(t, cs, "file_move", map[string]any{"branch": "feature", "from": "src/util.go", "to": "lib/util.go"}, &mv)
	var del control.FileDeleteResult
	call(t, cs, "file_delete", map[string]any{"branch": "feature", "path": "data", "recursive": true}, &del)
	if del.Removed != 2 {
		t.Fatalf("file_delete: %+v", del)
	}

	// Branches.
	var diff struct {
		Changes []struct{ Path, Kind string } `json:"changes"`
		Added   int                           `json:"added"`
	}
	call(t, cs, "diff", map[string]any{"branch": "feature"}, &diff)
	got := map[string]string{}
	for _, c := range diff.Changes {
		got[c.Path] = c.Kind
	}
	for p, k := range map[string]string{"pkg/new/new.go": "added", "src/main.go": "modified", "README.md": "modified", "src/util.go": "deleted", "lib/util.go": "added", "data/bin.dat": "deleted"} {
		if got[p] != k {
			t.Errorf("diff: %s is %q, want %s (diff %v)", p, got[p], k, got)
		}
	}
	// The same changes as a git patch, whole and cut.
	var pd struct {
		Patch          string `json:"patch"`
		PatchTruncated bool   `json:"patch_truncated"`
	}
	res := call(t, cs, "diff", map[string]any{"branch": "feature", "patch": true}, &pd)
	for _, want := range []string{
		"diff --git a/src/main.go b/src/main.go\n",
		"-func main() { println(\"hello\") }\n+func main() { println(\"bye\") }\n",
		"diff --git a/pkg/new/new.go b/pkg/new/new.go\nnew file mode 100644\n",
		"diff --git a/data/bin.dat b/data/bin.dat\ndeleted file mode 100644\n",
		"GIT binary patch",
	} {
		if !strings.Contains(pd.Patch, want) || !strings.Contains(text(res), want) {
			t.Fatalf("diff with patch lacks %q:\n%s", want, pd.Patch)
		}
	}
	if pd.PatchTruncated {
		t.Fatalf("a %d-byte patch is cut at the default bound", len(pd.Patch))
	}
	var cut struct {
		Patch          string `json:"patch"`
		PatchTruncated bool   `json:"patch_truncated"`
	}
	call(t, cs, "diff", map[string]any{"branch": "feature", "patch": true, "patch_limit": 100}, &cut)
	if !cut.PatchTruncated || len(cut.Patch) > 100 || !strings.HasSuffix(cut.Patch, "\n") || !strings.HasPrefix(pd.Patch, cut.Patch) {
		t.Fatalf("patch cut at 100 bytes: truncated %v, %d bytes %q", cut.PatchTruncated, len(cut.Patch), cut.Patch)
	}
	cut.Patch, cut.PatchTruncated = "", false
	call(t, cs, "diff", map[string]any{"branch": "feature", "patch": true, "patch_limit": len(pd.Patch)}, &cut)
	if cut.PatchTruncated || cut.Patch != pd.Patch {
		t.Fatalf("a patch of exactly patch_limit bytes: truncated %v, %d of %d bytes", cut.PatchTruncated, len(cut.Patch), len(pd.Patch))
	}
	wantError(t, cs, "bad_request", "diff", map[string]any{"branch": "feature", "since": "v1"})
	wantError(t, cs, "bad_request", "diff", map[string]any{"branch": "feature", "patch": true, "patch_limit": 1 << 30})

	var cp struct{ Branch, Label string }
	call(t, cs, "checkpoint", map[string]any{"branch": "feature", "label": "v1"}, &cp)
	call(t, cs, "file_write", map[string]any{"branch": "feature", "path": "scratch.txt", "content": "oops"}, nil)
	pd.Patch = ""
	call(t, cs, "diff", map[string]any{"branch": "feature", "patch": true, "since": "v1"}, &pd)
	if !strings.HasPrefix(pd.Patch, "diff --git a/scratch.txt b/scratch.txt\nnew file mode 100644\n") || strings.Count(pd.Patch, "diff --git") != 1 {
		t.Fatalf("patch since checkpoint v1, want scratch.txt alone:\n%s", pd.Patch)
	}
	wantError(t, cs, "not_found", "diff", map[string]any{"branch": "feature", "patch": true, "since": "nosuch"})
	call(t, cs, "restore", map[string]any{"branch": "feature", "label": "v1"}, nil)
	wantError(t, cs, "not_found", "file_read", map[string]any{"branch": "feature", "path": "scratch.txt"})
	var status struct {
		Branch *struct {
			Name        string   `json:"name"`
			Checkpoints []string `json:"checkpoints"`
		} `json:"branch"`
	}
	call(t, cs, "status", map[string]any{"branch": "feature"}, &status)
	if status.Branch == nil || status.Branch.Name != "feature" || !slices.Contains(status.Branch.Checkpoints, "v1") {
		t.Fatalf("status of feature: %+v", status.Branch)
	}
	var list struct {
		Branches []struct{ Name, State string } `json:"branches"`
	}
	call(t, cs, "list", map[string]any{"state": "live"}, &list)
	if len(list.Branches) != 2 {
		t.Fatalf("live branches: %+v", list)
	}
	var commit struct {
		FastPath    bool `json:"fast_path"`
		Changes     int  `json:"changes"`
		MergedPaths *int `json:"merged_paths"`
	}
	call(t, cs, "commit", map[string]any{"branch": "feature"}, &commit)
	if !commit.FastPath || commit.Changes != len(diff.Changes) || commit.MergedPaths == nil || *commit.MergedPaths != 0 {
		t.Fatalf("commit: %+v, want the fast path with the diff's %d changes", commit, len(diff.Changes))
	}
	call(t, cs, "file_read", map[string]any{"branch": "main", "path": "lib/util.go"}, &rd)
	if !strings.Contains(rd.Content, "TODO") {
		t.Fatalf("main after the commit: %+v", rd)
	}
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "doomed"}, nil)
	var ab struct {
		Aborted []string `json:"aborted"`
	}
	call(t, cs, "abort", map[string]any{"branch": "doomed"}, &ab)
	if !slices.Equal(ab.Aborted, []string{"doomed"}) {
		t.Fatalf("abort: %+v", ab)
	}
}

func TestErrorCodes(t *testing.T) {
	store, _ := newStore(t)
	cs := session(t, store, nil)
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "a"}, nil)
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "b"}, nil)
	wantError(t, cs, "exists", "fork", map[string]any{"parent": "main", "name": "a"})
	wantError(t, cs, "invalid_name", "fork", map[string]any{"parent": "main", "name": "no/slash"})
	wantError(t, cs, "not_found", "diff", map[string]any{"branch": "nope"})
	wantError(t, cs, "not_found", "file_read", map[string]any{"branch": "a", "path": "missing.txt"})
	wantError(t, cs, "read_only", "commit", map[string]any{"branch": "main"})
	wantError(t, cs, "not_unique", "file_edit", map[string]any{"branch": "a", "path": "src/main.go", "old_string": "main", "new_string": "x"})
	wantError(t, cs, "no_match", "file_edit", map[string]any{"branch": "a", "path": "src/main.go", "old_string": "absent", "new_string": "x"})
	wantError(t, cs, "bad_request", "file_search", map[string]any{"branch": "a", "pattern": "("})
	wantError(t, cs, "bad_request", "exec", map[string]any{"branch": "a", "argv": []string{"true"}})
	wantError(t, cs, "not_found", "job_status", map[string]any{"job_id": "nope"})
	call(t, cs, "file_write", map[string]any{"branch": "a", "path": "a.txt", "content": "a\n"}, nil)
	call(t, cs, "file_write", map[string]any{"branch": "b", "path": "README.md", "content": "b\n"}, nil)
	// main changes README.md under b: b's commit conflicts on it.
	call(t, cs, "file_write", map[string]any{"branch": "main", "path": "README.md", "content": "main\n"}, nil)
	m := wantError(t, cs, "conflict", "commit", map[string]any{"branch": "b"})
	if d, _ := m["detail"].([]any); len(d) != 1 || d[0] != "README.md" {
		t.Fatalf("conflict detail %v, want [README.md]", m)
	}
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "c"}, nil)
	// a's commit invalidates its sibling c.
	call(t, cs, "commit", map[string]any{"branch": "a"}, nil)
	wantError(t, cs, "invalidated", "diff", map[string]any{"branch": "c"})
	wantError(t, cs, "invalidated", "file_write", map[string]any{"branch": "c", "path": "y", "content": "y"})
	// A committed branch is gone for the file tools.
	res := callRaw(t, cs, "file_read", map[string]any{"branch": "a", "path": "README.md"})
	if !res.IsError || !(strings.HasPrefix(text(res), "invalidated: ") || strings.HasPrefix(text(res), "not_found: ")) {
		t.Fatalf("file_read of a committed branch: %s", text(res))
	}
	// Input that breaks the schema is a tool error too, and the session
	// goes on.
	res = callRaw(t, cs, "fork", map[string]any{"parent": 1})
	if !res.IsError {
		t.Fatalf("fork with a bad argument type succeeded: %s", text(res))
	}
	// An unknown tool is a protocol error, and the server lives on.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nosuch", Arguments: map[string]any{}}); err == nil {
		t.Fatal("an unknown tool succeeded")
	}
	call(t, cs, "list", nil, nil)
}

func TestPathsConfinedToBranch(t *testing.T) {
	store, _ := newStore(t)
	cs := session(t, store, nil)
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "w"}, nil)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"file_read", map[string]any{"path": "../store/control.token"}},
		{"file_read", map[string]any{"path": "src/../../x"}},
		{"file_read", map[string]any{"path": "/etc/passwd"}},
		{"file_read", map[string]any{"path": "etc/passwd"}},
		{"file_write", map[string]any{"path": "etc/evil", "content": "x"}},
		{"file_write", map[string]any{"path": "../evil", "content": "x"}},
		{"file_edit", map[string]any{"path": "etc/hostname", "old_string": "a", "new_string": "b"}},
		{"file_list", map[string]any{"path": "etc"}},
		{"file_search", map[string]any{"path": "etc", "pattern": "root"}},
		{"file_delete", map[string]any{"path": "../store"}},
		{"file_move", map[string]any{"from": "README.md", "to": "etc/README.md"}},
		{"file_move", map[string]any{"from": "README.md", "to": "../README.md"}},
	} {
		tc.args["branch"] = "w"
		wantError(t, cs, "outside_branch", tc.tool, tc.args)
	}
	// The symlink itself is inside the branch: it lists, and deletes.
	var ls control.FileListResult
	call(t, cs, "file_list", map[string]any{"branch": "w", "glob": "etc"}, &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Type != "symlink" || ls.Entries[0].Target != "/etc" {
		t.Fatalf("file_list of the symlink: %+v", ls)
	}
	call(t, cs, "file_delete", map[string]any{"branch": "w", "path": "etc"}, nil)
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("/etc/passwd after deleting the branch's symlink: %v", err)
	}
}

// progressLog collects progress notifications.
type progressLog struct {
	mu  sync.Mutex
	got []*mcp.ProgressNotificationParams
}

func (p *progressLog) add(n *mcp.ProgressNotificationParams) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, n)
}

func (p *progressLog) messages() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, n := range p.got {
		out = append(out, n.Message)
	}
	return out
}

func TestJobsWithProgress(t *testing.T) {
	store, work := newStore(t)
	var pl progressLog
	cs := session(t, store, pl.add, "--workdir-root", work)
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "e"}, nil)
	params := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
		"branch": "e", "argv": []string{"/bin/sh", "-c", "echo hi > out.txt"}, "wait_seconds": 60}}
	params.SetProgressToken("exec-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("exec: %v %s", err, text(res))
	}
	var job struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Records []struct {
			Outcome  string `json:"outcome"`
			ExitCode int    `json:"exit_code"`
		} `json:"records"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &job)
	if job.State != "done" || len(job.Records) != 1 || job.Records[0].Outcome != "won" {
		t.Fatalf("exec job: %s", b)
	}
	// The client handles notifications apart from results: wait for them.
	msgs := pl.messages()
	for deadline := time.Now().Add(30 * time.Second); len(msgs) < 3 && time.Now().Before(deadline); msgs = pl.messages() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(msgs) < 3 || !strings.Contains(msgs[0], "started") || !strings.Contains(msgs[len(msgs)-1], "job done") {
		t.Fatalf("progress notifications %q, want started, ended and the job's end", msgs)
	}
	// Without wait: a job id at once, then job_status long-polls it.
	call(t, cs, "race", map[string]any{"parent": "main", "cmds": [][]string{{"/bin/sh", "-c", "exit 3"}, {"/bin/sh", "-c", "sleep 0.2"}}}, &job)
	if job.ID == "" {
		t.Fatal("race returned no job id")
	}
	call(t, cs, "job_status", map[string]any{"job_id": job.ID, "wait_seconds": 60}, &job)
	if job.State != "done" || len(job.Records) != 2 || job.Records[0].Outcome != "failed" || job.Records[1].Outcome != "won" {
		t.Fatalf("race job: %+v", job)
	}
	// best_of scores by what each attempt writes to fd 3: the last one wins.
	var best struct {
		State   string `json:"state"`
		Winner  string `json:"winner"`
		Records []struct {
			Branch  string   `json:"branch"`
			Outcome string   `json:"outcome"`
			Score   *float64 `json:"score"`
		} `json:"records"`
	}
	call(t, cs, "best_of", map[string]any{"parent": "main", "n": 3, "argv": []string{"/bin/sh", "-c", `echo "${BRANCHNFS_BRANCH##*-}" >&3`}, "wait_seconds": 60}, &best)
	if best.State != "done" || len(best.Records) != 3 || best.Winner != best.Records[2].Branch || best.Records[2].Outcome != "won" || best.Records[0].Outcome != "lost" {
		t.Fatalf("best_of job: %+v", best)
	}
	// job_cancel ends a running job.
	pid := filepath.Join(work, "exec.pid")
	// (e was invalidated by the race's commit into main.)
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "e2"}, nil)
	call(t, cs, "exec", map[string]any{"branch": "e2", "argv": []string{"/bin/sh", "-c", "echo $$ > " + pid + "; exec sleep 600"}}, &job)
	for deadline := time.Now().Add(time.Minute); ; {
		if b, err := os.ReadFile(pid); err == nil && len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			res := callRaw(t, cs, "job_status", map[string]any{"job_id": job.ID})
			t.Fatalf("the exec job did not start: %s", text(res))
		}
		time.Sleep(10 * time.Millisecond)
	}
	call(t, cs, "job_cancel", map[string]any{"job_id": job.ID}, &job)
	if job.State != "done" || len(job.Records) != 1 || job.Records[0].Outcome != "interrupted" {
		t.Fatalf("cancelled exec job: %+v", job)
	}
	wantError(t, cs, "not_found", "job_cancel", map[string]any{"job_id": "nope"})
}

func TestCancelRaceJob(t *testing.T) {
	store, work := newStore(t)
	var pl progressLog
	cs := session(t, store, pl.add, "--workdir-root", work)
	pidDir := filepath.Join(work, "pids")
	if err := os.MkdirAll(pidDir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(pidDir, 0o777)
	ctx, cancel := context.WithCancel(context.Background())
	params := &mcp.CallToolParams{Name: "race", Arguments: map[string]any{
		"parent": "main", "n": 3, "argv": []string{"/bin/sh", "-c", "echo $$ > " + pidDir + "/$BRANCHNFS_BRANCH; exec sleep 600"},
		"wait_seconds": 600}}
	params.SetProgressToken("race-1")
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, params)
		done <- err
	}()
	// Cancel once the three attempts run, and their starts came as
	// progress notifications.
	deadline := time.Now().Add(time.Minute)
	for {
		ents, _ := os.ReadDir(pidDir)
		if len(ents) == 3 && len(pl.messages()) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempts did not start: %d pid files, progress %q", len(ents), pl.messages())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	// The job ends with every attempt interrupted, and no process left.
	var jobs struct {
		Branches []struct{ Name, State string } `json:"branches"`
	}
	for time.Now().Before(deadline) {
		call(t, cs, "list", map[string]any{"state": "live"}, &jobs)
		if len(jobs.Branches) == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(jobs.Branches) != 1 {
		t.Fatalf("live branches after the cancel: %+v", jobs.Branches)
	}
	ents, _ := os.ReadDir(pidDir)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(pidDir, e.Name()))
		var pid int
		fmt.Sscan(string(b), &pid)
		for time.Now().Before(deadline) && alive(pid) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("attempt %s (pid %d) still runs after the cancel", e.Name(), pid)
		}
	}

}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie has exited.
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// Through a running server: `branchnfs mcp` uses its API, and /v1/mcp
// serves the same tools on the control socket, behind the token.
func TestThroughServer(t *testing.T) {
	store, _ := newStore(t)
	testbin.StartServer(t, bin, store, testbin.ServerOptions{User: regular})
	cs := session(t, store, nil)
	var st struct {
		Mode   string `json:"mode"`
		Listen string `json:"listen"`
	}
	call(t, cs, "status", nil, &st)
	if st.Mode != "server" || st.Listen == "" {
		t.Fatalf("status through a server: %+v", st)
	}
	call(t, cs, "fork", map[string]any{"parent": "main", "name": "s"}, nil)
	call(t, cs, "file_write", map[string]any{"branch": "s", "path": "x.txt", "content": "x"}, nil)

	sock := control.SocketPath(store)
	token, err := os.ReadFile(control.TokenPath(store))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	// No token: 401, before any MCP.
	hc := &http.Client{Transport: &http.Transport{DialContext: dial}}
	resp, err := hc.Post("http://branchnfs/v1/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/v1/mcp without the token: HTTP %d, want 401", resp.StatusCode)
	}
	authed := &http.Client{Transport: bearer{token: strings.TrimSpace(string(token)), rt: &http.Transport{DialContext: dial}}}
	c := mcp.NewClient(&mcp.Implementation{Name: "branchnfs-test", Version: "1"}, nil)
	hs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://branchnfs/v1/mcp", HTTPClient: authed}, nil)
	if err != nil {
		t.Fatalf("connect to /v1/mcp: %v", err)
	}
	defer hs.Close()
	var diff struct {
		Changes []struct{ Path string } `json:"changes"`
	}
	call(t, hs, "diff", map[string]any{"branch": "s"}, &diff)
	if len(diff.Changes) != 1 || diff.Changes[0].Path != "x.txt" {
		t.Fatalf("diff over /v1/mcp: %+v", diff)
	}
	wantError(t, hs, "not_found", "diff", map[string]any{"branch": "nope"})
	// The server runs no attempts without --mount: a tool error that says so.
	m := wantError(t, hs, "bad_request", "exec", map[string]any{"branch": "s", "argv": []string{"true"}})
	if !strings.Contains(fmt.Sprint(m["message"]), "--mount") {
		t.Fatalf("exec without a mount: %v", m)
	}
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

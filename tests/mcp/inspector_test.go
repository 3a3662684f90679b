package mcpe2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// InspectorEnv names the directory of the installed
// @modelcontextprotocol/inspector-cli package (scripts/test.sh installs
// it and sets it).
const InspectorEnv = "BRANCHNFS_MCP_INSPECTOR"

// inspector runs the MCP inspector's CLI against `branchnfs mcp --store
// store`, run as the regular user, and decodes its JSON answer.
func inspector(t *testing.T, dir, store string, out any, args ...string) {
	t.Helper()
	// The server command is a script: the CLI would take the flags of a
	// command line for its own.
	script := filepath.Join(filepath.Dir(store), "mcp-server.sh")
	run := fmt.Sprintf("exec %s mcp --store %s\n", bin, store)
	if os.Geteuid() == 0 {
		run = fmt.Sprintf("exec setpriv --reuid=%d --regid=%d --clear-groups %s mcp --store %s\n", regular.UID, regular.GID, bin, store)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"+run), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", append([]string{"index.js", script}, args...)...)
	// The CLI finds its package.json relative to the working directory.
	cmd.Dir = filepath.Join(dir, "build")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("mcp-inspector-cli %s: %v: %s", strings.Join(args, " "), err, stdout.String())
	}
}

// The MCP inspector's CLI, a client on the TypeScript SDK that checks
// structured content against the output schemas, lists the tools and
// drives fork, file_write, diff and commit.
func TestInspectorCLI(t *testing.T) {
	dir := os.Getenv(InspectorEnv)
	_, nodeErr := exec.LookPath("node")
	_, statErr := os.Stat(filepath.Join(dir, "build", "index.js"))
	testbin.Prerequisite(t, dir != "" && nodeErr == nil && statErr == nil,
		"node or @modelcontextprotocol/inspector-cli is missing ($"+InspectorEnv+" names its package directory)",
		"apt-get install nodejs npm, then run scripts/test.sh, which installs it")
	store, _ := newStore(t)
	var list struct {
		Tools []struct {
			Name         string         `json:"name"`
			OutputSchema map[string]any `json:"outputSchema"`
		} `json:"tools"`
	}
	inspector(t, dir, store, &list, "--method", "tools/list")
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.OutputSchema == nil {
			t.Errorf("tool %s has no output schema", tool.Name)
		}
	}
	for _, want := range allTools {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	type result struct {
		IsError           bool                    `json:"isError"`
		Content           []struct{ Text string } `json:"content"`
		StructuredContent json.RawMessage         `json:"structuredContent"`
	}
	callTool := func(tool string, args ...string) result {
		t.Helper()
		cli := []string{"--method", "tools/call", "--tool-name", tool}
		for _, a := range args {
			cli = append(cli, "--tool-arg", a)
		}
		var r result
		inspector(t, dir, store, &r, cli...)
		if r.IsError || len(r.StructuredContent) == 0 {
			t.Fatalf("%s %v: %+v", tool, args, r)
		}
		return r
	}
	callTool("fork", "parent=main", "name=agent")
	callTool("file_write", "branch=agent", "path=notes/todo.md", "content=- ship it")
	r := callTool("diff", "branch=agent")
	var diff struct {
		Changes []struct{ Path, Kind string } `json:"changes"`
	}
	json.Unmarshal(r.StructuredContent, &diff)
	if len(diff.Changes) != 2 || diff.Changes[1].Path != "notes/todo.md" || diff.Changes[1].Kind != "added" {
		t.Fatalf("diff: %s", r.StructuredContent)
	}
	r = callTool("commit", "branch=agent")
	var commit struct {
		Parent  string `json:"parent"`
		Changes int    `json:"changes"`
	}
	json.Unmarshal(r.StructuredContent, &commit)
	if commit.Parent != "main" || commit.Changes != 2 {
		t.Fatalf("commit: %s", r.StructuredContent)
	}
	r = callTool("file_read", "branch=main", "path=notes/todo.md")
	if !strings.Contains(string(r.StructuredContent), "ship it") {
		t.Fatalf("main after the commit: %s", r.StructuredContent)
	}
}

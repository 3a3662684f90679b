package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/branchnfs/branchnfs/nfsserver/control/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect serves the tools over a fresh store, in-process, and returns a
// client session.
func connect(t *testing.T) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := kv.OpenBadger(t.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := control.NewServer(control.ServerOptions{Backend: m, Token: "test"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, nil) }()
	s, err := mcpserver.NewServer(mcpserver.Options{Client: srv.LocalClient(), Mode: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	st1, st2 := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st1, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, st2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Close()
		cancel()
		<-done
		m.Close()
		st.Close()
	})
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func TestConflictErrorCarriesPaths(t *testing.T) {
	cs := connect(t)
	callTool(t, cs, "fork", map[string]any{"parent": "main", "name": "b"})
	callTool(t, cs, "file_write", map[string]any{"branch": "b", "path": "x", "content": "b"})
	callTool(t, cs, "file_write", map[string]any{"branch": "main", "path": "x", "content": "main"})
	res := callTool(t, cs, "commit", map[string]any{"branch": "b"})
	if !res.IsError {
		t.Fatal("a conflicting commit succeeded")
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !strings.HasPrefix(text, "conflict: ") || !strings.HasSuffix(text, "[paths: x]") {
		t.Fatalf("error text %q: want the code first and the paths last", text)
	}
	te, _ := res.Meta[mcpserver.ErrorMetaKey].(map[string]any)
	if te["code"] != "conflict" || len(te["detail"].([]any)) != 1 {
		t.Fatalf("_meta %v", res.Meta)
	}
	if res.StructuredContent != nil {
		t.Fatalf("a tool error carries structured content %v: clients would check it against the output schema", res.StructuredContent)
	}
}

func TestUnknownToolKeepsSession(t *testing.T) {
	cs := connect(t)
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nosuch"}); err == nil {
		t.Fatal("an unknown tool succeeded")
	}
	if res := callTool(t, cs, "list", nil); res.IsError {
		t.Fatalf("list after an unknown tool: %v", res.Content)
	}
}

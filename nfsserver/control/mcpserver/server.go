package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Name is the MCP server's implementation name.
const Name = "branchnfs"

// ErrorMetaKey is the _meta key of a tool error's details (ToolError).
const ErrorMetaKey = "branchnfs/error"

// Options configures the MCP server. Client is required.
type Options struct {
	// Client reaches the control API (a running server's, or one served
	// in-process over a store opened directly).
	Client *control.Client
	// Mode says which: "server" (a running server) or "direct" (this
	// process opened the store). Reported by the status tool.
	Mode string
	// Version is branchnfs's version.
	Version string
	Logger  *slog.Logger
}

// ToolError is a failed tool call: the control API's error code, its
// message, and the paths, children or clients it names.
type ToolError struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Detail  []string `json:"detail,omitempty"`
	err     error
}

func (e *ToolError) Error() string {
	s := e.Code + ": " + e.Message
	if len(e.Detail) > 0 {
		s += " [" + detailName(e.Code) + ": " + strings.Join(e.Detail, ", ") + "]"
	}
	return s
}

func (e *ToolError) Unwrap() error { return e.err }

func detailName(code string) string {
	switch code {
	case control.CodeConflict:
		return "paths"
	case control.CodeHasChildren:
		return "children"
	case control.CodeInUse:
		return "clients"
	}
	return "detail"
}

// toolError turns an error of the control API into a ToolError.
func toolError(err error) *ToolError {
	var te *ToolError
	if errors.As(err, &te) {
		return te
	}
	code, detail := control.ErrorCode(err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		code = "cancelled"
	}
	return &ToolError{Code: code, Message: strings.TrimPrefix(err.Error(), "branches: "), Detail: detail, err: err}
}

// NewServer returns an MCP server with every tool.
func NewServer(o Options) (*mcp.Server, error) {
	if o.Client == nil {
		return nil, errors.New("mcpserver: Options.Client is nil")
	}
	if o.Mode == "" {
		o.Mode = "server"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "branchnfs: copy-on-write branches of a workspace", Version: o.Version},
		&mcp.ServerOptions{Logger: o.Logger, Instructions: instructions})
	t := &tools{c: o.Client, mode: o.Mode}
	t.register(s)
	s.AddReceivingMiddleware(errorMeta)
	return s, nil
}

// Handler serves the MCP server as streamable HTTP (the /v1/mcp
// endpoint). Authentication is the caller's (the control API's token).
func Handler(o Options) (http.Handler, error) {
	s, err := NewServer(o)
	if err != nil {
		return nil, err
	}
	// The control socket is a unix socket: no browser reaches it, so the
	// localhost DNS rebinding check (made for TCP) does not apply.
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Logger: o.Logger, DisableLocalhostProtection: true,
			// A file_write carries up to control.MaxWriteBytes, base64.
			MaxRequestBodyBytes: 2*control.MaxWriteBytes + 1<<20,
			// A client that went away without ending its session does not
			// hold it for the server's life.
			SessionTimeout: time.Hour}), nil
}

// errorMeta puts a failed tool's ToolError into the result's _meta.
func errorMeta(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		// An unknown tool gives a nil result with the error.
		if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
			var te *ToolError
			if errors.As(r.GetError(), &te) {
				if r.Meta == nil {
					r.Meta = mcp.Meta{}
				}
				r.Meta[ErrorMetaKey] = te
			}
		}
		return res, err
	}
}

const instructions = `branchnfs gives copy-on-write branches of a workspace. Work on a branch of your own: fork it from main (fork), change its files (file_* tools, or a mount), run commands in it (exec), look at what changed (diff), then commit it into its parent or abort it. race and best_of run several attempts in sibling branches and keep the best. File paths are relative to the branch's root. Errors start with a code: not_found, exists, invalid_name, invalidated, conflict, has_children, in_use, outside_branch, no_match, not_unique, bad_request.`

// tools holds what the tool handlers share.
type tools struct {
	c    *control.Client // read only
	mode string          // read only
}

// addTool adds a tool whose handler returns its output, a short text, or
// an error (a tool error carrying the API's code).
func addTool[In, Out any](s *mcp.Server, name, desc string, fn func(ctx context.Context, req *mcp.CallToolRequest, in In) (Out, string, error)) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc}, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, text, err := fn(ctx, req, in)
		if err != nil {
			var zero Out
			return nil, zero, toolError(err)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
	})
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"

	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/branchnfs/branchnfs/nfsserver/control/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

type mcpOptions struct {
	*globalOptions
	// WorkdirRoot runs attempts in WorkdirRoot/BRANCH, plain directories,
	// when this command opens the store itself. Hidden, for tests on hosts
	// without an NFS client.
	WorkdirRoot string
}

func newMCPCommand(g *globalOptions) *cobra.Command {
	opts := &mcpOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the branch, attempt and file tools to an agent over MCP (stdio)",
		Long: `Serve branchnfs to an agent over the Model Context Protocol on stdin and
stdout: tools to fork, list, diff, commit, abort, checkpoint and restore
branches, to run exec, race and best_of as jobs (job_status, job_cancel),
and to read, write, edit, list, search, delete and move a branch's files
without a mount (README.md, "Agents over MCP").

It talks to the running server's control API, or, when no server runs,
opens the store itself and holds it while it runs (attempts then cannot
run: they need a server's mount). Add it to an agent with, for example:

  claude mcp add branchnfs -- branchnfs mcp

Whoever can call its exec, race and best_of tools runs commands as the
store's owner. A running server serves the same tools at /v1/mcp on its
control socket (streamable HTTP, behind the API's token).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMCP(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.WorkdirRoot, "workdir-root", "", "testing only: with no server, run attempts in DIR/BRANCH, a plain directory")
	cmd.Flags().MarkHidden("workdir-root")
	return cmd
}

func runMCP(ctx context.Context, o *mcpOptions) error {
	b, err := o.openBackend(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	mo := mcpserver.Options{Client: b.client, Mode: "server", Version: version}
	if b.client == nil {
		srv, err := directControl(b, o.WorkdirRoot)
		if err != nil {
			return err
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(sctx, nil) }()
		defer func() { cancel(); <-done }()
		mo.Client, mo.Mode = srv.LocalClient(), "direct"
	}
	s, err := mcpserver.NewServer(mo)
	if err != nil {
		return err
	}
	err = s.Run(ctx, &mcp.StdioTransport{})
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil // the client closed the session, or a signal
	}
	return err
}

// directControl serves the control API in-process over a store this
// process opened: the MCP tools then run the same code in both modes.
func directControl(b *backend, workdirRoot string) (*control.Server, error) {
	var tok [32]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	dir := b.store.dir
	var ro *runner.Options
	if workdirRoot != "" {
		root, err := filepath.Abs(workdirRoot)
		if err != nil {
			return nil, err
		}
		ro = &runner.Options{Backend: b.store.mgr, Store: dir, Workdir: func(branch string) (string, error) {
			d := filepath.Join(root, branch)
			return d, os.MkdirAll(d, 0o755)
		}}
		if logDir := filepath.Join(dir, "attempts"); os.MkdirAll(logDir, 0o700) == nil {
			ro.LogDir = logDir
		}
	}
	mgr := b.store.mgr
	return control.NewServer(control.ServerOptions{
		Backend: mgr,
		Token:   hex.EncodeToString(tok[:]),
		Status: func() control.Status {
			return control.Status{Version: version, PID: os.Getpid(), Store: dir, Ignore: mgr.Ignore()}
		},
		Runner:   ro,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoRunner: fmt.Sprintf("no server runs on store %s: this MCP server opened the store itself, and attempts run in a server's mount; start `branchnfs serve --mount DIR` and restart the MCP server", dir),
	})
}

// mcpMount is the MCP endpoint of serve's control API: the tools of
// `branchnfs mcp` as streamable HTTP at /v1/mcp, behind the API's token.
func mcpMount(logger *slog.Logger) map[string]func(*control.Client) http.Handler {
	return map[string]func(*control.Client) http.Handler{
		"/v1/mcp": func(c *control.Client) http.Handler {
			h, err := mcpserver.Handler(mcpserver.Options{Client: c, Mode: "server", Version: version, Logger: logger})
			if err != nil {
				return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					http.Error(w, err.Error(), http.StatusInternalServerError)
				})
			}
			return h
		},
	}
}

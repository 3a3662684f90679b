// Package mcpserver serves branchnfs to agents over the Model Context
// Protocol: the tools of branches (fork, list, diff, commit, abort,
// checkpoint, restore, status), of attempts run as jobs (exec, race,
// best_of, job_status, job_cancel) and of a branch's files for agents
// without a mount (file_read, file_write, file_edit, file_list,
// file_search, file_delete, file_move).
//
// The tools call the control API through a *control.Client: over the
// store's socket when a server runs, or in-process (Server.LocalClient)
// over a store the command opened itself, or from the /v1/mcp endpoint of
// the server. NewServer returns the MCP server; `branchnfs mcp` runs it on
// stdio, and Handler serves it as streamable HTTP.
//
// Every tool has an input and an output schema (inferred from the Go
// types of tools.go); a result carries the output as structured content
// and a short text. A failure is a tool error (isError) whose text starts
// with the control API's error code ("not_found: ...", "conflict: ...
// [paths: a, b]") and whose _meta "branchnfs/error" holds the code and
// its details, never a protocol error or a dropped connection.
//
// Security: the tools run with the rights of the store's owner, and the
// attempt tools run commands as that user. Whoever can call them can run
// commands as the store's owner: the stdio server is the user's own
// process, and /v1/mcp needs the control API's token.
package mcpserver

// Package control is branchnfs's local control API: HTTP+JSON on a unix
// socket inside the store directory (mode 0600), plus a Go client.
//
// The server side (Server) exposes a Backend — in production a
// *branches.Manager — under /v1/. The client side (Client) implements the
// same Backend interface over the socket, so the CLI runs every branch
// command against either the running server or a store it opened itself.
//
// # Endpoints
//
//	GET  /v1/status                          Status
//	GET  /v1/branches                        []branches.Info
//	POST /v1/branches                        {"parent","name","checkpoint"} -> 201 ForkResult
//	GET  /v1/branches/{name}                 branches.Info
//	GET  /v1/branches/{name}/diff            branches.Diff; ?format=patch[&since=LABEL]: a git patch
//	GET  /v1/branches/{name}/changes         change set (tar) for an apply; ?since=LABEL, ?content=0
//	GET  /v1/branches/{name}/export          tar stream; ?checkpoint=LABEL, ?sub=PATH
//	POST /v1/branches/{name}/commit          branches.CommitResult
//	POST /v1/branches/{name}/abort           branches.AbortResult
//	POST /v1/branches/{name}/checkpoints     {"label"} -> 201 branches.Checkpoint
//	POST /v1/branches/{name}/restore         {"label"} -> RestoreResult
//	POST /v1/import/update                   {"from","force"} -> the summary of import --update (importupdate.go)
//	POST /v1/branches/{name}/files/OP        file operations without a mount (files.go):
//	                                         read, write, edit, list, search, delete, move
//
// ServerOptions.Mounts adds endpoints behind the same token, built over a
// client that reaches the server in-process (Server.LocalClient): the MCP
// endpoint /v1/mcp is mounted so by the command.
//
// The patch, changes and export answers are streams: an error found after
// their first bytes comes in the trailer Branchnfs-Error (a JSON error
// body) to a client that sent "TE: trailers", and cuts the stream
// (no final chunk) for others.
//
// # Authentication
//
// The API runs commands as the store's owner (the jobs API), so every
// request must carry "Authorization: Bearer TOKEN", the token of
// STORE/control.token (EnsureToken), compared in constant time; others get
// 401, code unauthorized. That holds on the unix socket too: a TCP forward
// of the socket (socat, SSH, a VM's port forward) connects through it, and
// the server cannot tell it from a local client. NewClient sends the token
// of the store beside the socket, or over TCP $BRANCHNFS_CONTROL_TOKEN
// (else the file $BRANCHNFS_CONTROL_TOKEN_FILE).
//
// # Error model
//
// Every error is a JSON body {"error":{"code":..., "message":...}} with an
// HTTP status that matches the code (see Codes). Conflict, has_children and
// invalidated errors carry "paths", "children" and "invalidated_by". The
// client turns an error body back into the matching branches error
// (*branches.ConflictError, *branches.HasChildrenError,
// *branches.InvalidatedError, or an *Error that matches the sentinel with
// errors.Is), so callers test errors the same way in both modes.
//
// # Concurrency
//
// Server calls the Backend from one goroutine per request; the Backend must
// be safe for concurrent use. Client is safe for concurrent use.
package control

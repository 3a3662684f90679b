package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/lograte"
)

// SocketName is the file name of the control socket inside the store
// directory.
const SocketName = "control.sock"

// SocketPath returns the control socket path of a store directory.
func SocketPath(storeDir string) string { return filepath.Join(storeDir, SocketName) }

// maxSocketPath is the longest unix socket path every supported OS accepts
// (sun_path is 104 bytes on macOS, 108 on Linux, NUL included).
const maxSocketPath = 103

// Backend is what the API serves. *branches.Manager implements it, and so
// does *Client.
type Backend interface {
	Fork(ctx context.Context, parent, name string) (branches.Info, error)
	ForkCheckpoint(ctx context.Context, parent, label, name string) (branches.Info, error)
	Commit(ctx context.Context, name string) (branches.CommitResult, error)
	Abort(ctx context.Context, name string) (branches.AbortResult, error)
	Checkpoint(ctx context.Context, name, label string) (branches.Checkpoint, error)
	Restore(ctx context.Context, name, label string) error
	List(ctx context.Context) ([]branches.Info, error)
	Get(ctx context.Context, name string) (branches.Info, error)
	Diff(ctx context.Context, name string) (branches.Diff, error)
}

var (
	_ Backend = (*branches.Manager)(nil)
	_ Backend = (*Client)(nil)
)

// Status describes the running server (GET /v1/status).
type Status struct {
	Version      string    `json:"version"`
	PID          int       `json:"pid"`
	Store        string    `json:"store"`  // absolute store directory
	Listen       string    `json:"listen"` // NFS address, host:port
	Port         int       `json:"port"`   // NFS (and MOUNT) port
	Started      time.Time `json:"started"`
	LiveBranches int       `json:"live_branches"`
	// Ignore is the store's ignore list: file-name patterns kept out of
	// diffs and merge conflicts.
	Ignore []string `json:"ignore"`
	// Mount is where the server mounted the export / itself (serve
	// --mount), "" if it did not; attempts run in Mount/BRANCH.
	Mount string `json:"mount,omitempty"`
	// NFS holds the NFS server's counters (connections, requests, errors,
	// bytes, calls per procedure), as the server reports them.
	NFS any `json:"nfs,omitempty"`
	// HeapLive is the Go heap the last garbage collection kept: the
	// server's own memory, without the collector's slack.
	HeapLive int64 `json:"heap_live_bytes,omitempty"`
	// Branches holds the branch manager's counters of background work
	// (reclaim passes, reclaimed layers and blocks, folded layers).
	Branches any `json:"branches,omitempty"`
	// SourceDir is the folder main was imported from, where apply
	// writes by default; "" when none is recorded.
	SourceDir string `json:"source_dir,omitempty"`
}

// ForkRequest is the body of POST /v1/branches.
type ForkRequest struct {
	Parent     string `json:"parent"`
	Name       string `json:"name"`
	Checkpoint string `json:"checkpoint,omitempty"` // fork from this checkpoint of parent
}

// ForkResult is the answer to a fork: the new branch and its export path.
type ForkResult struct {
	branches.Info
	Export string `json:"export"`
}

// LabelRequest is the body of the checkpoint and restore endpoints.
type LabelRequest struct {
	Label string `json:"label"`
}

// RestoreResult is the answer to a restore.
type RestoreResult struct {
	Branch string `json:"branch"`
	Label  string `json:"label"`
}

// ExportPath is the NFS export path of a branch.
func ExportPath(name string) string { return "/" + name }

// ServerOptions configures a Server. Backend and Token are required.
type ServerOptions struct {
	Backend Backend
	// Token is the API token (EnsureToken): every request must carry
	// "Authorization: Bearer TOKEN" or is answered 401, code unauthorized.
	Token string
	// TokenFile is where clients find Token, for the 401 message; "":
	// STORE/control.token.
	TokenFile string
	// Status fills in the status endpoint; nil answers only the version and
	// the live branch count.
	Status func() Status
	Logger *slog.Logger
	// Runner runs the attempts of the jobs API (jobs.go); nil: the server
	// runs none. Its Events field is set per job.
	Runner *runner.Options
	// NoRunner is why the server runs no attempts, for the error a job
	// request gets when Runner is nil (default: start the server with
	// serve --mount DIR).
	NoRunner string
	// InUse lists the NFS clients that use a branch
	// (nfsserver.Server.BranchUsers); commit and abort of a branch in use
	// are refused with code in_use unless the request says "force". nil:
	// no branch is ever in use.
	InUse func(branch string) []string
	// Mounts adds endpoints (pattern -> handler maker) served behind the
	// token; each maker gets a client that reaches this server in-process
	// (LocalClient). The MCP endpoint, /v1/mcp, is mounted so.
	Mounts map[string]func(local *Client) http.Handler
	// ImportUpdate runs POST /v1/import/update (import --update while the
	// server runs); nil: the endpoint answers that this server cannot.
	ImportUpdate ImportUpdater
}

// ChangeRequest is the optional body of the commit and abort endpoints.
type ChangeRequest struct {
	// Force commits or aborts even if NFS clients use the branch.
	Force bool `json:"force,omitempty"`
}

// Server serves the control API.
type Server struct {
	opts    ServerOptions // read only
	hs      *http.Server
	jobs    *jobs
	refused lograte.Limiter         // limits the log lines of refused requests
	local   *pipeListener           // in-process connections (LocalClient)
	client  *Client                 // over local; read only
	mounts  map[string]http.Handler // read only
}

// NewServer returns a Server for opts.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Backend == nil {
		return nil, errors.New("control: ServerOptions.Backend is nil")
	}
	if opts.Token == "" {
		return nil, errors.New("control: ServerOptions.Token is empty: the API runs commands, it needs a token (EnsureToken)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{opts: opts, jobs: newJobs(), local: newPipeListener(), mounts: map[string]http.Handler{}}
	s.client = newClient(s.local.dial, opts.Token, nil)
	for pattern, mk := range opts.Mounts {
		s.mounts[pattern] = mk(s.client)
	}
	s.hs = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	return s, nil
}

// Listen creates the control socket at path with mode 0600, replacing a
// stale socket file left by a killed server. The caller must make sure no
// live server answers on path (Client.Status) before calling it.
func Listen(path string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("control: socket path %q is %d bytes, longer than the %d a unix socket allows; use a shorter store path",
			path, len(path), maxSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control: remove stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	return ln, nil
}

// LocalClient returns a client that reaches the server in-process, without
// a socket, while Serve runs.
func (s *Server) LocalClient() *Client { return s.client }

// Serve serves the API on ln, and to LocalClient, until ctx is cancelled
// or Close is called. A nil ln serves LocalClient alone. It returns nil
// after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.reapLeases(lctx)
	if ln == nil {
		ln = s.local
	} else {
		go s.hs.Serve(s.local)
	}
	err := s.hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving, waiting up to 5 s for requests in flight, and
// ends every job (fence, kill, wait for the trees).
func (s *Server) Close() error {
	// Cancel jobs first: their long polls and event streams then end.
	s.jobs.cancel()
	defer s.jobs.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.hs.Shutdown(ctx)
}

// Handler returns the HTTP handler of the API (for tests and embedding).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("GET /v1/branches", s.list)
	mux.HandleFunc("POST /v1/branches", s.fork)
	mux.HandleFunc("GET /v1/branches/{name}", s.get)
	mux.HandleFunc("GET /v1/branches/{name}/diff", s.diff)
	mux.HandleFunc("GET /v1/branches/{name}/changes", s.changes)
	mux.HandleFunc("GET /v1/branches/{name}/export", s.export)
	mux.HandleFunc("POST /v1/branches/{name}/commit", s.commit)
	mux.HandleFunc("POST /v1/branches/{name}/abort", s.abort)
	mux.HandleFunc("POST /v1/branches/{name}/checkpoints", s.checkpoint)
	mux.HandleFunc("POST /v1/branches/{name}/restore", s.restore)
	mux.HandleFunc("POST /v1/branches/{name}/takeover", s.takeover)
	s.jobRoutes(mux)
	s.metaRoutes(mux)
	mux.HandleFunc("POST /v1/gc", s.gc)
	mux.HandleFunc("POST /v1/import/update", s.importUpdate)
	s.spaceRoutes(mux)
	s.fileRoutes(mux)
	for pattern, h := range s.mounts {
		mux.Handle(pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: errorDetail{
			Code: CodeBadRequest, Message: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)}})
	})
	return s.recoverer(s.authorize(mux))
}

// recoverer keeps one bad request from taking the server down.
func (s *Server) recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.opts.Logger.Error("control: panic in handler", "method", r.Method, "path", r.URL.Path, "panic", v)
				writeJSON(w, http.StatusInternalServerError, errorBody{Error: errorDetail{
					Code: CodeInternal, Message: fmt.Sprintf("internal error: %v", v)}})
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	body, status := makeErrorBody(err)
	if status >= 500 {
		s.opts.Logger.Error("control: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

// decode reads a JSON body of at most 1 MiB into v, strictly: unknown
// fields are an error.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeLimit(w, r, v, 1<<20)
}

// decodeLimit is decode for a body of at most limit bytes.
func decodeLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: invalid JSON body: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON body", ErrBadRequest)
	}
	return nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	var st Status
	if s.opts.Status != nil {
		st = s.opts.Status()
	}
	st.LiveBranches = 0
	if ll, ok := s.opts.Backend.(liveLister); ok {
		st.LiveBranches = len(ll.Live())
		writeJSON(w, http.StatusOK, st)
		return
	}
	infos, err := s.opts.Backend.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, in := range infos {
		if in.State == branches.StateLive {
			st.LiveBranches++
		}
	}
	writeJSON(w, http.StatusOK, st)
}

// liveLister is a Backend that lists its live branches from memory
// (*branches.Manager). Status uses it rather than List, which reads the
// store (sizes, checkpoints): every CLI command probes the status with a
// short timeout, so it must not cost more on a bigger store.
type liveLister interface {
	Live() []branches.Info
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	infos, err := s.opts.Backend.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if infos == nil {
		infos = []branches.Info{}
	}
	writeJSON(w, http.StatusOK, infos)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	in, err := s.opts.Backend.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req ForkRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Parent == "" || req.Name == "" {
		s.fail(w, r, fmt.Errorf("%w: fork needs a non-empty \"parent\" and \"name\"", branches.ErrInvalidName))
		return
	}
	var in branches.Info
	var err error
	if req.Checkpoint != "" {
		in, err = s.opts.Backend.ForkCheckpoint(r.Context(), req.Parent, req.Checkpoint, req.Name)
	} else {
		in, err = s.opts.Backend.Fork(r.Context(), req.Parent, req.Name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, ForkResult{Info: in, Export: ExportPath(in.Name)})
}

// checkInUse decodes the optional ChangeRequest body and refuses, unless
// forced, to change a branch that NFS clients use.
func (s *Server) checkInUse(w http.ResponseWriter, r *http.Request) error {
	var req ChangeRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			return err
		}
	}
	if req.Force || s.opts.InUse == nil {
		return nil
	}
	name := r.PathValue("name")
	if in, err := s.opts.Backend.Get(r.Context(), name); err != nil || in.State != branches.StateLive || in.Parent == "" {
		return nil // the backend refuses it anyway, with the better reason
	}
	if users := s.opts.InUse(name); len(users) > 0 {
		return &InUseError{Branch: name, Clients: users}
	}
	return nil
}

func (s *Server) commit(w http.ResponseWriter, r *http.Request) {
	if err := s.checkInUse(w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.opts.Backend.Commit(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) abort(w http.ResponseWriter, r *http.Request) {
	if err := s.checkInUse(w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.opts.Backend.Abort(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	var req LabelRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Label == "" {
		s.fail(w, r, fmt.Errorf("%w: checkpoint needs \"label\"", ErrBadRequest))
		return
	}
	cp, err := s.opts.Backend.Checkpoint(r.Context(), r.PathValue("name"), req.Label)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, cp)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	var req LabelRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Label == "" {
		s.fail(w, r, fmt.Errorf("%w: restore needs \"label\"", ErrBadRequest))
		return
	}
	name := r.PathValue("name")
	if err := s.opts.Backend.Restore(r.Context(), name, req.Label); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, RestoreResult{Branch: name, Label: req.Label})
}

func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
	case "patch":
		s.diffPatch(w, r)
		return
	default:
		s.fail(w, r, fmt.Errorf("%w: unknown diff format %q: use json or patch", ErrBadRequest, f))
		return
	}
	if r.URL.Query().Get("since") != "" {
		s.fail(w, r, fmt.Errorf("%w: since is for format=patch; the JSON diff is since the fork", ErrBadRequest))
		return
	}
	d, err := s.opts.Backend.Diff(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if d.Changes == nil {
		d.Changes = []branches.Change{}
	}
	writeJSON(w, http.StatusOK, d)
}

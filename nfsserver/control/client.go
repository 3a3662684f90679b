package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/branchnfs/branchnfs/branches"
)

// ErrNoServer is returned by Dial when no server answers on the socket.
var ErrNoServer = errors.New("control: no server running")

// Client talks to a server's control API over its unix socket. It
// implements Backend.
type Client struct {
	socket   string // read only
	token    string // read only; "" if tokenErr
	tokenErr error  // why the client has no token; read only
	hc       *http.Client
}

// NewClient returns a client for the socket at path. It does not connect.
// A path of the form tcp://HOST:PORT reaches the API over TCP instead: the
// server only listens on its unix socket, but a forward of it (socat, SSH,
// a VM's port forward) can be reached that way.
//
// Every request carries the server's API token: for a socket path, the
// one in the store directory beside it (STORE/control.token); for a TCP
// address, $BRANCHNFS_CONTROL_TOKEN, else the file $BRANCHNFS_CONTROL_TOKEN_FILE
// names.
func NewClient(socket string) *Client {
	network, addr := "unix", socket
	if a, ok := strings.CutPrefix(socket, "tcp://"); ok {
		network, addr = "tcp", a
	}
	tok, terr := clientToken(socket)
	c := newClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}, tok, terr)
	c.socket = socket
	return c
}

// newClient returns a client whose connections dial gives.
func newClient(dial func(context.Context) (net.Conn, error), token string, tokenErr error) *Client {
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{token: token, tokenErr: tokenErr, hc: &http.Client{Transport: tr}}
}

// Dial returns a client for the socket at path if a server answers there
// within timeout, and the server's status. It returns an error matching
// ErrNoServer when the socket is missing or nobody answers (a stale socket
// of a killed server).
func Dial(ctx context.Context, socket string, timeout time.Duration) (*Client, Status, error) {
	c := NewClient(socket)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		c.Close()
		var ae *Error
		if errors.Is(err, fs.ErrPermission) {
			return nil, Status{}, fmt.Errorf("control: %s: %w (the control socket is only open to the store's owner)", socket, err)
		}
		if errors.Is(err, ErrUnauthorized) {
			return nil, Status{}, fmt.Errorf("control: %s: %w", socket, err)
		}
		if errors.As(err, &ae) {
			// Something answered, but not as a branchnfs server.
			return nil, Status{}, fmt.Errorf("control: %s does not answer like a branchnfs server: %w", socket, err)
		}
		return nil, Status{}, fmt.Errorf("%w on %s: %v", ErrNoServer, socket, err)
	}
	return c, st, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// do sends a request and decodes a 2xx answer into out, or an error body
// into an error.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://branchnfs"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("control: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("control: %s %s: reading answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb errorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return &Error{Status: resp.StatusCode, Code: CodeInternal,
				Message: fmt.Sprintf("control: %s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(data))}
		}
		err := eb.Error.toError(resp.StatusCode)
		if c.tokenErr != nil && errors.Is(err, ErrUnauthorized) {
			return fmt.Errorf("%w (this client has no token: %v)", err, c.tokenErr)
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("control: %s %s: bad answer: %w", method, path, err)
	}
	return nil
}

func branchPath(name, suffix string) string {
	return "/v1/branches/" + url.PathEscape(name) + suffix
}

// Status returns the server's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st)
	return st, err
}

// Fork forks parent into a new branch name.
func (c *Client) Fork(ctx context.Context, parent, name string) (branches.Info, error) {
	var res ForkResult
	err := c.do(ctx, http.MethodPost, "/v1/branches", ForkRequest{Parent: parent, Name: name}, &res)
	return res.Info, err
}

// ForkCheckpoint forks checkpoint label of parent into a new branch name.
func (c *Client) ForkCheckpoint(ctx context.Context, parent, label, name string) (branches.Info, error) {
	var res ForkResult
	err := c.do(ctx, http.MethodPost, "/v1/branches", ForkRequest{Parent: parent, Name: name, Checkpoint: label}, &res)
	return res.Info, err
}

// Commit commits branch name into its parent. It fails with an
// *InUseError (ErrInUse) when NFS clients use the branch.
func (c *Client) Commit(ctx context.Context, name string) (branches.CommitResult, error) {
	var res branches.CommitResult
	err := c.do(ctx, http.MethodPost, branchPath(name, "/commit"), nil, &res)
	return res, err
}

// ForceCommit is Commit even if NFS clients use the branch.
func (c *Client) ForceCommit(ctx context.Context, name string) (branches.CommitResult, error) {
	var res branches.CommitResult
	err := c.do(ctx, http.MethodPost, branchPath(name, "/commit"), ChangeRequest{Force: true}, &res)
	return res, err
}

// Abort discards branch name and its descendants. It fails with an
// *InUseError (ErrInUse) when NFS clients use the branch.
func (c *Client) Abort(ctx context.Context, name string) (branches.AbortResult, error) {
	var res branches.AbortResult
	err := c.do(ctx, http.MethodPost, branchPath(name, "/abort"), nil, &res)
	return res, err
}

// ForceAbort is Abort even if NFS clients use the branch.
func (c *Client) ForceAbort(ctx context.Context, name string) (branches.AbortResult, error) {
	var res branches.AbortResult
	err := c.do(ctx, http.MethodPost, branchPath(name, "/abort"), ChangeRequest{Force: true}, &res)
	return res, err
}

// Checkpoint freezes branch name as label.
func (c *Client) Checkpoint(ctx context.Context, name, label string) (branches.Checkpoint, error) {
	var res branches.Checkpoint
	err := c.do(ctx, http.MethodPost, branchPath(name, "/checkpoints"), LabelRequest{Label: label}, &res)
	return res, err
}

// Restore rolls branch name back to checkpoint label.
func (c *Client) Restore(ctx context.Context, name, label string) error {
	return c.do(ctx, http.MethodPost, branchPath(name, "/restore"), LabelRequest{Label: label}, nil)
}

// List returns every branch the store knows.
func (c *Client) List(ctx context.Context) ([]branches.Info, error) {
	var res []branches.Info
	err := c.do(ctx, http.MethodGet, "/v1/branches", nil, &res)
	return res, err
}

// Get returns one branch.
func (c *Client) Get(ctx context.Context, name string) (branches.Info, error) {
	var res branches.Info
	err := c.do(ctx, http.MethodGet, branchPath(name, ""), nil, &res)
	return res, err
}

// Diff returns what branch name changed since its fork.
func (c *Client) Diff(ctx context.Context, name string) (branches.Diff, error) {
	var res branches.Diff
	err := c.do(ctx, http.MethodGet, branchPath(name, "/diff"), nil, &res)
	return res, err
}

func (c *Client) fileOp(ctx context.Context, branch, op string, in, out any) error {
	return c.do(ctx, http.MethodPost, branchPath(branch, "/files/"+op), in, out)
}

// ReadFile reads part of a file of a branch.
func (c *Client) ReadFile(ctx context.Context, branch string, req FileReadRequest) (FileReadResult, error) {
	var res FileReadResult
	err := c.fileOp(ctx, branch, "read", req, &res)
	return res, err
}

// WriteFile creates or replaces a file of a branch.
func (c *Client) WriteFile(ctx context.Context, branch string, req FileWriteRequest) (FileWriteResult, error) {
	var res FileWriteResult
	err := c.fileOp(ctx, branch, "write", req, &res)
	return res, err
}

// EditFile replaces a string in a file of a branch.
func (c *Client) EditFile(ctx context.Context, branch string, req FileEditRequest) (FileEditResult, error) {
	var res FileEditResult
	err := c.fileOp(ctx, branch, "edit", req, &res)
	return res, err
}

// ListFiles lists a directory of a branch.
func (c *Client) ListFiles(ctx context.Context, branch string, req FileListRequest) (FileListResult, error) {
	var res FileListResult
	err := c.fileOp(ctx, branch, "list", req, &res)
	return res, err
}

// SearchFiles searches the files of a branch for a regular expression.
func (c *Client) SearchFiles(ctx context.Context, branch string, req FileSearchRequest) (FileSearchResult, error) {
	var res FileSearchResult
	err := c.fileOp(ctx, branch, "search", req, &res)
	return res, err
}

// DeleteFile removes a file or directory of a branch.
func (c *Client) DeleteFile(ctx context.Context, branch string, req FileDeleteRequest) (FileDeleteResult, error) {
	var res FileDeleteResult
	err := c.fileOp(ctx, branch, "delete", req, &res)
	return res, err
}

// MoveFile renames a file or directory of a branch.
func (c *Client) MoveFile(ctx context.Context, branch string, req FileMoveRequest) (FileMoveResult, error) {
	var res FileMoveResult
	err := c.fileOp(ctx, branch, "move", req, &res)
	return res, err
}

// StartJob starts a job the server supervises.
func (c *Client) StartJob(ctx context.Context, req JobRequest) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs", req, &j)
	return j, err
}

// GetJob returns a job; with wait > 0 it first waits up to that long for
// the job to end.
func (c *Client) GetJob(ctx context.Context, id string, wait time.Duration) (Job, error) {
	p := "/v1/jobs/" + url.PathEscape(id)
	if wait > 0 {
		p += fmt.Sprintf("?wait=%g", wait.Seconds())
	}
	var j Job
	err := c.do(ctx, http.MethodGet, p, nil, &j)
	return j, err
}

// CancelJob ends a job (its attempts are fenced and killed) and returns it.
func (c *Client) CancelJob(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id), nil, &j)
	return j, err
}

// JobEvents calls fn for each event of a job, from its first, until the
// job ends (a last event of kind "done" carries the job) or ctx ends.
func (c *Client) JobEvents(ctx context.Context, id string, fn func(JobEvent)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://branchnfs/v1/jobs/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("control: job events: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb errorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return &Error{Status: resp.StatusCode, Code: CodeInternal, Message: fmt.Sprintf("control: job events: HTTP %d", resp.StatusCode)}
		}
		return eb.Error.toError(resp.StatusCode)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev JobEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("control: job events: %w", err)
		}
		fn(ev)
	}
}

// ErrorCode returns the API error code of err (Classify), and the
// conflicting paths, children or clients it carries.
func ErrorCode(err error) (code string, detail []string) {
	d, _ := makeErrorBody(err)
	e := d.Error
	switch {
	case len(e.Paths) > 0:
		return e.Code, e.Paths
	case len(e.Children) > 0:
		return e.Code, e.Children
	case len(e.Clients) > 0:
		return e.Code, e.Clients
	}
	var ae *Error
	if errors.As(err, &ae) && e.Code == CodeInternal {
		return ae.Code, nil
	}
	return e.Code, nil
}

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/results"
)

// Outputs is a Backend that writes what branches hold as streams: a git
// patch (GET /v1/branches/{name}/diff?format=patch), a tar stream of a
// branch or checkpoint (GET /v1/branches/{name}/export), and a change set
// for an apply (GET /v1/branches/{name}/changes). *branches.Manager and
// *Client implement it.
type Outputs interface {
	Patch(ctx context.Context, name, since string, w io.Writer) (results.PatchStats, error)
	ChangeSet(ctx context.Context, name, since string, content bool, w io.Writer) error
	Export(ctx context.Context, name, label, sub string, w io.Writer) (results.TarStats, error)
}

var (
	_ Outputs = (*branches.Manager)(nil)
	_ Outputs = (*Client)(nil)
)

// streamErrorTrailer carries the error of a stream that failed after its
// first bytes were sent (the status line was then 200 already): a JSON
// error body, as in an error answer, for a client that sent "TE:
// trailers". Other clients get a stream cut without its final chunk.
const streamErrorTrailer = "Branchnfs-Error"

// writeTracker remembers whether anything was written.
type writeTracker struct {
	w       http.ResponseWriter
	started bool
}

func (t *writeTracker) Write(p []byte) (int, error) {
	t.started = true
	return t.w.Write(p)
}

// stream answers r with what fn writes, of content type ctype. An error
// before the first byte is an ordinary error answer; after it, the
// stream is cut and the error sent in the trailer.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, ctype string, fn func(w io.Writer) error) {
	out, ok := s.opts.Backend.(Outputs)
	if !ok || out == nil {
		s.fail(w, r, fmt.Errorf("%w: this server cannot write patches, change sets or exports", ErrBadRequest))
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Trailer", streamErrorTrailer)
	t := &writeTracker{w: w}
	err := fn(t)
	if err == nil {
		return
	}
	if !t.started {
		w.Header().Del("Trailer")
		s.fail(w, r, err)
		return
	}
	s.opts.Logger.Warn("control: stream cut by an error", "method", r.Method, "path", r.URL.Path, "err", err)
	if !strings.Contains(r.Header.Get("TE"), "trailers") {
		// A client that reads no trailers sees a cut stream (no final
		// chunk): an error, never a short answer taken for whole.
		panic(http.ErrAbortHandler)
	}
	body, _ := makeErrorBody(err)
	b, _ := json.Marshal(body)
	w.Header().Set(streamErrorTrailer, string(b))
}

func (s *Server) outputs() Outputs { o, _ := s.opts.Backend.(Outputs); return o }

func (s *Server) diffPatch(w http.ResponseWriter, r *http.Request) {
	s.stream(w, r, "text/x-diff; charset=utf-8", func(w io.Writer) error {
		_, err := s.outputs().Patch(r.Context(), r.PathValue("name"), r.URL.Query().Get("since"), w)
		return err
	})
}

func (s *Server) changes(w http.ResponseWriter, r *http.Request) {
	content := r.URL.Query().Get("content") != "0"
	s.stream(w, r, "application/x-tar", func(w io.Writer) error {
		return s.outputs().ChangeSet(r.Context(), r.PathValue("name"), r.URL.Query().Get("since"), content, w)
	})
}

func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.stream(w, r, "application/x-tar", func(w io.Writer) error {
		_, err := s.outputs().Export(r.Context(), r.PathValue("name"), q.Get("checkpoint"), q.Get("sub"), w)
		return err
	})
}

// getStream copies the answer to a GET of path to w.
func (c *Client) getStream(ctx context.Context, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://branchnfs"+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("TE", "trailers")
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("control: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb errorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return &Error{Status: resp.StatusCode, Code: CodeInternal,
				Message: fmt.Sprintf("control: GET %s: HTTP %d: %s", path, resp.StatusCode, data)}
		}
		err := eb.Error.toError(resp.StatusCode)
		if c.tokenErr != nil && errors.Is(err, ErrUnauthorized) {
			return fmt.Errorf("%w (this client has no token: %v)", err, c.tokenErr)
		}
		return err
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("control: GET %s: %w", path, err)
	}
	if v := resp.Trailer.Get(streamErrorTrailer); v != "" {
		var eb errorBody
		if json.Unmarshal([]byte(v), &eb) != nil || eb.Error.Code == "" {
			return fmt.Errorf("control: GET %s: the stream failed: %s", path, v)
		}
		return eb.Error.toError(http.StatusInternalServerError)
	}
	return nil
}

// Patch writes branch name's changes since its fork (or its checkpoint
// since) to w as a git patch. The server does not send the stats: they
// are zero.
func (c *Client) Patch(ctx context.Context, name, since string, w io.Writer) (results.PatchStats, error) {
	q := url.Values{"format": {"patch"}}
	if since != "" {
		q.Set("since", since)
	}
	return results.PatchStats{}, c.getStream(ctx, branchPath(name, "/diff?"+q.Encode()), w)
}

// ChangeSet writes branch name's changes since its fork (or its
// checkpoint since) to w as a change set, with content when asked.
func (c *Client) ChangeSet(ctx context.Context, name, since string, content bool, w io.Writer) error {
	q := url.Values{}
	if since != "" {
		q.Set("since", since)
	}
	if !content {
		q.Set("content", "0")
	}
	return c.getStream(ctx, branchPath(name, "/changes?"+q.Encode()), w)
}

// Export writes branch name (or its checkpoint label; only the subtree
// sub when set) to w as a tar stream. The stats are zero.
func (c *Client) Export(ctx context.Context, name, label, sub string, w io.Writer) (results.TarStats, error) {
	q := url.Values{}
	if label != "" {
		q.Set("checkpoint", label)
	}
	if sub != "" {
		q.Set("sub", sub)
	}
	return results.TarStats{}, c.getStream(ctx, branchPath(name, "/export?"+q.Encode()), w)
}

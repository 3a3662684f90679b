package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
)

// ImportUpdateRequest is the body of POST /v1/import/update: bring what
// changed in the folder main was imported from into main, in the server.
type ImportUpdateRequest struct {
	// From is the folder to read instead of the recorded one, an absolute
	// path; it is recorded for next time.
	From string `json:"from,omitempty"`
	// Force updates main even while it has live children (they keep their
	// snapshot); without it such an update is refused with has_children.
	Force bool `json:"force,omitempty"`
}

// ImportUpdater runs an update of main from its folder
// (ServerOptions.ImportUpdate) and returns its summary, which the
// endpoint answers as JSON.
type ImportUpdater func(ctx context.Context, req ImportUpdateRequest) (any, error)

// ImportUpdate asks the server to update main from its folder and decodes
// the summary into out.
func (c *Client) ImportUpdate(ctx context.Context, req ImportUpdateRequest, out any) error {
	return c.do(ctx, http.MethodPost, "/v1/import/update", req, out)
}

func (s *Server) importUpdate(w http.ResponseWriter, r *http.Request) {
	if s.opts.ImportUpdate == nil {
		s.fail(w, r, errors.New("control: this server cannot update main from a folder"))
		return
	}
	var req ImportUpdateRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if req.From != "" && !filepath.IsAbs(req.From) {
		s.fail(w, r, fmt.Errorf("%w: from %q is not an absolute path: the server's working directory is not the client's", ErrBadRequest, req.From))
		return
	}
	res, err := s.opts.ImportUpdate(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

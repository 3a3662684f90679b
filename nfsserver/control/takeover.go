package control

import (
	"context"
	"errors"
	"net/http"

	"github.com/branchnfs/branchnfs/branches"
)

// Takeoverer is a Backend that makes itself the owner of a branch whose
// owning server is gone (POST /v1/branches/{name}/takeover), when
// several servers share the store. *branches.Manager and *Client
// implement it.
type Takeoverer interface {
	Takeover(ctx context.Context, name string) (branches.Info, error)
}

var (
	_ Takeoverer = (*branches.Manager)(nil)
	_ Takeoverer = (*Client)(nil)
)

// Takeover asks the server to become the owner of branch name.
func (c *Client) Takeover(ctx context.Context, name string) (branches.Info, error) {
	var res branches.Info
	err := c.do(ctx, http.MethodPost, branchPath(name, "/takeover"), nil, &res)
	return res, err
}

func (s *Server) takeover(w http.ResponseWriter, r *http.Request) {
	t, ok := s.opts.Backend.(Takeoverer)
	if !ok {
		s.fail(w, r, errors.New("control: this server's backend cannot take branches over"))
		return
	}
	res, err := t.Takeover(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

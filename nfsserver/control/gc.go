package control

import (
	"context"
	"errors"
	"net/http"

	"github.com/branchnfs/branchnfs/branches"
)

// Collector is a Backend that gives disk space back (POST /v1/gc).
// *branches.Manager and *Client implement it.
type Collector interface {
	GC(ctx context.Context) (branches.GCStats, error)
}

var (
	_ Collector = (*branches.Manager)(nil)
	_ Collector = (*Client)(nil)
)

// GC asks the server to give disk space back (see branches.Manager.GC); it
// answers when done.
func (c *Client) GC(ctx context.Context) (branches.GCStats, error) {
	var res branches.GCStats
	err := c.do(ctx, http.MethodPost, "/v1/gc", nil, &res)
	return res, err
}

func (s *Server) gc(w http.ResponseWriter, r *http.Request) {
	c, ok := s.opts.Backend.(Collector)
	if !ok {
		s.fail(w, r, errors.New("control: this server's backend cannot give disk space back"))
		return
	}
	res, err := c.GC(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

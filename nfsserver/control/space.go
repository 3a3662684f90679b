package control

import (
	"context"
	"errors"
	"net/http"

	"github.com/branchnfs/branchnfs/branches"
)

// SpaceReporter is a Backend that tells where the store's disk space goes
// (GET /v1/space) and what each branch alone holds (GET
// /v1/space/unique). *branches.Manager and *Client implement it.
type SpaceReporter interface {
	Space(ctx context.Context) (branches.SpaceReport, error)
	UniqueBytes(ctx context.Context) (map[string]int64, error)
}

var (
	_ SpaceReporter = (*branches.Manager)(nil)
	_ SpaceReporter = (*Client)(nil)
)

// Space asks the server where the store's disk space goes (see
// branches.Manager.Space).
func (c *Client) Space(ctx context.Context) (branches.SpaceReport, error) {
	var res branches.SpaceReport
	err := c.do(ctx, http.MethodGet, "/v1/space", nil, &res)
	return res, err
}

// UniqueBytes asks the server for the bytes only each live or invalidated
// branch references (see branches.Manager.UniqueBytes).
func (c *Client) UniqueBytes(ctx context.Context) (map[string]int64, error) {
	var res map[string]int64
	err := c.do(ctx, http.MethodGet, "/v1/space/unique", nil, &res)
	return res, err
}

func (s *Server) spaceRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/space", func(w http.ResponseWriter, r *http.Request) {
		sr, ok := s.opts.Backend.(SpaceReporter)
		if !ok {
			s.fail(w, r, errors.New("control: this server's backend cannot report its disk space"))
			return
		}
		res, err := sr.Space(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /v1/space/unique", func(w http.ResponseWriter, r *http.Request) {
		sr, ok := s.opts.Backend.(SpaceReporter)
		if !ok {
			s.fail(w, r, errors.New("control: this server's backend cannot report its disk space"))
			return
		}
		res, err := sr.UniqueBytes(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
}

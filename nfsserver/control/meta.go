package control

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/branchnfs/branchnfs/branches"
)

// MetaBackend is implemented by backends that keep labels, scores and
// leases on branches (*branches.Manager, *Client).
type MetaBackend interface {
	SetMeta(ctx context.Context, name string, u branches.MetaUpdate) (branches.Meta, error)
	Metas(ctx context.Context) (map[string]branches.Meta, error)
}

// leaseExpirer is implemented by backends whose leases the server enforces
// (*branches.Manager).
type leaseExpirer interface {
	ExpireLeases(ctx context.Context, now time.Time) ([]string, error)
}

var (
	_ MetaBackend  = (*branches.Manager)(nil)
	_ MetaBackend  = (*Client)(nil)
	_ leaseExpirer = (*branches.Manager)(nil)
)

// leaseInterval is how often the server looks for expired leases.
const leaseInterval = time.Second

func (s *Server) metaRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PATCH /v1/branches/{name}/meta", s.setMeta)
	mux.HandleFunc("GET /v1/meta", s.metas)
}

func (s *Server) metaBackend() (MetaBackend, error) {
	mb, ok := s.opts.Backend.(MetaBackend)
	if !ok {
		return nil, fmt.Errorf("%w: this server keeps no labels, scores or leases", ErrBadRequest)
	}
	return mb, nil
}

func (s *Server) setMeta(w http.ResponseWriter, r *http.Request) {
	mb, err := s.metaBackend()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var u branches.MetaUpdate
	if err := decode(w, r, &u); err != nil {
		s.fail(w, r, err)
		return
	}
	md, err := mb.SetMeta(r.Context(), r.PathValue("name"), u)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, md)
}

func (s *Server) metas(w http.ResponseWriter, r *http.Request) {
	mb, err := s.metaBackend()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all, err := mb.Metas(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, all)
}

// reapLeases aborts branches whose lease expired, every leaseInterval,
// until ctx ends. Aborting fences them; their supervisors (the runner
// polls its branches) then kill their processes.
func (s *Server) reapLeases(ctx context.Context) {
	le, ok := s.opts.Backend.(leaseExpirer)
	if !ok {
		return
	}
	t := time.NewTicker(leaseInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if _, err := le.ExpireLeases(ctx, now); err != nil && ctx.Err() == nil {
				s.opts.Logger.Warn("control: expiring leases", "err", err)
			}
		}
	}
}

// SetMeta changes the labels, score or lease of branch name.
func (c *Client) SetMeta(ctx context.Context, name string, u branches.MetaUpdate) (branches.Meta, error) {
	var md branches.Meta
	err := c.do(ctx, http.MethodPatch, branchPath(name, "/meta"), u, &md)
	return md, err
}

// Metas returns the labels, score and lease of every live branch that has
// any, by name.
func (c *Client) Metas(ctx context.Context) (map[string]branches.Meta, error) {
	var all map[string]branches.Meta
	err := c.do(ctx, http.MethodGet, "/v1/meta", nil, &all)
	return all, err
}

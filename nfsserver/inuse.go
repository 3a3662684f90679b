package nfsserver

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/branches"
)

// InUseWindow is how recently a connection must have used a branch's file
// handles for BranchUsers to count it.
const InUseWindow = time.Minute

// BranchUsers lists the clients that use branch name, for refusing to
// commit or abort it by mistake: "CLIENT:PATH mounted" for every MOUNT of
// the branch's export (or a directory in it) without a UMNT, and
// "ADDRESS used its files 12s ago" for every open connection that used
// handles of the branch's export in the last InUseWindow. Handles reached
// through the export "/" do not count: under "/" branches come and go (the
// attempts of exec and race run there and commit their own branch). The
// list is empty when nobody uses the branch.
func (s *Server) BranchUsers(name string) []string {
	_, info, err := s.opts.Branches.View(name)
	users := s.mounts.clients(name, info.ID) // info.ID is 0 on error: any of that name
	for i, u := range users {
		users[i] = u + " mounted"
	}
	if err != nil {
		return users
	}
	now := time.Now()
	var recent []string
	s.mu.Lock()
	for c := range s.conns {
		if v, ok := c.used.Load(info.ID); ok {
			if ago := now.Sub(time.Unix(0, v.(*atomic.Int64).Load())); ago < InUseWindow {
				recent = append(recent, fmt.Sprintf("%s used its files %s ago", c.remote, ago.Round(time.Second)))
			}
		}
	}
	s.mu.Unlock()
	slices.Sort(recent)
	return append(users, recent...)
}

// branchEnded reports whether branch id was committed, aborted or
// invalidated (or is unknown: ids are never reused).
func (s *Server) branchEnded(id branches.BranchID) bool {
	_, _, err := s.opts.Branches.ViewByID(id)
	return errors.Is(err, branches.ErrStale)
}

// forgetUse forgets the recorded use of branch's handles (every branch's
// if branch is nil) by the open connections from remote's host: an
// unmount by a client says it is done, though its connection may stay
// open for its other mounts (Linux shares one connection per server).
func (s *Server) forgetUse(remote string, branch *branches.BranchID) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if h, _, err := net.SplitHostPort(c.remote); err != nil || h != host {
			continue
		}
		if branch != nil {
			c.used.Delete(*branch)
		} else {
			c.used.Clear()
		}
	}
}

// Mounts lists "CLIENT:PATH" for every MOUNT without a UMNT, sorted (what
// DUMP answers), for warning about mounted clients at shutdown.
func (s *Server) Mounts() []string {
	s.mounts.mu.Lock()
	out := make([]string, 0, len(s.mounts.m))
	for k := range s.mounts.m {
		out = append(out, k[0]+":"+k[1])
	}
	s.mounts.mu.Unlock()
	slices.Sort(out)
	return out
}

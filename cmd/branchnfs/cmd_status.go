package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

type statusOptions struct {
	*globalOptions
	JSON bool
}

func newStatusCommand(g *globalOptions) *cobra.Command {
	opts := &statusOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the store's disk space, what gc could give back, branches by state, and the server",
		Long: `Show the space the store occupies on disk (allocated, as du counts it),
the bytes of block content it holds, what gc could give back now (content
no branch references, layers nothing reaches, deleted values still in the
store's logs), the number of branches by state, and the server's address
if one runs. It reads every block reference and every key of the store
once. --json prints the status object (see README.md).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStatus(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the status as JSON")
	return cmd
}

// storeStatus is the --json output of status.
type storeStatus struct {
	Store string `json:"store"`
	// Server is the running server, null when none runs (status then
	// read the store itself).
	Server *serverInfo `json:"server"`
	branches.SpaceReport
}

type serverInfo struct {
	Version string `json:"version"` // of the server's binary
	PID     int    `json:"pid"`
	Listen  string `json:"listen"` // NFS address, host:port
	Mount   string `json:"mount,omitempty"`
}

func runStatus(ctx context.Context, o *statusOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		sr, ok := b.Backend.(control.SpaceReporter)
		if !ok {
			return errors.New("this backend cannot report its disk space")
		}
		rep, err := sr.Space(ctx)
		if err != nil {
			return err
		}
		out := storeStatus{SpaceReport: rep}
		if b.client != nil {
			out.Store = b.status.Store
			out.Server = &serverInfo{Version: b.status.Version, PID: b.status.PID, Listen: b.status.Listen, Mount: b.status.Mount}
		} else if out.Store, err = o.storeDir(); err == nil {
			out.Store, _ = filepath.Abs(out.Store)
		}
		if o.JSON {
			return writeJSON(o.stdout, out)
		}
		printStatus(o.stdout, out)
		return nil
	})
}

func printStatus(w io.Writer, s storeStatus) {
	fmt.Fprintf(w, "store:        %s\n", s.Store)
	if s.Server != nil {
		fmt.Fprintf(w, "server:       branchnfs %s, pid %d, serving NFS on %s", s.Server.Version, s.Server.PID, s.Server.Listen)
		if s.Server.Mount != "" {
			fmt.Fprintf(w, ", mounted on %s", s.Server.Mount)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "server:       none runs")
	}
	if s.DiskBytes >= 0 {
		fmt.Fprintf(w, "on disk:      %s (allocated blocks, as du counts them)\n", kv.FormatBytes(uint64(s.DiskBytes)))
	}
	if q := s.MetadataQuota; q != nil {
		fmt.Fprintf(w, "metadata:     %s of the etcd cluster's %s quota used (--quota-backend-bytes; every key of the cluster counts)\n",
			kv.FormatBytes(uint64(max(q.UsedBytes, 0))), kv.FormatBytes(uint64(max(q.LimitBytes, 0))))
	}
	fmt.Fprintf(w, "content:      %s of blocks, each stored once", kv.FormatBytes(uint64(max(s.ContentBytes, 0))))
	if s.BlocksInObjectStore {
		fmt.Fprint(w, ", in the object store (the bucket has no size limit)")
	}
	fmt.Fprintln(w)
	r := s.Reclaimable
	fmt.Fprintf(w, "reclaimable:  %s now (branchnfs gc gives it back; the server also does by itself)\n", kv.FormatBytes(uint64(max(r.Total, 0))))
	fmt.Fprintf(w, "  content no branch references  %s\n", kv.FormatBytes(uint64(max(r.UnreferencedContent, 0))))
	fmt.Fprintf(w, "  layers nothing reaches        %d (%d keys, %s)\n", r.DeadLayers, r.DeadLayerKeys, kv.FormatBytes(uint64(max(r.DeadLayerBytes, 0))))
	if r.ValueLogGarbage >= 0 {
		fmt.Fprintf(w, "  deleted values in the logs    %s\n", kv.FormatBytes(uint64(r.ValueLogGarbage)))
	}
	var parts []string
	for _, st := range []branches.State{branches.StateLive, branches.StateInvalidated, branches.StateCommitted, branches.StateAborted} {
		parts = append(parts, fmt.Sprintf("%d %s", s.Branches[st], st))
	}
	fmt.Fprintf(w, "branches:     %s\n", strings.Join(parts, ", "))
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

// listMetaOptions are list's flags for the labels, scores and leases that
// runners keep on branches.
type listMetaOptions struct {
	Labels []string
	Sort   string
}

func (o *listMetaOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&o.Labels, "label", nil, "only branches with this label, as k=v (repeatable: all must match)")
	cmd.Flags().StringVar(&o.Sort, "sort", "", "score: a flat list, best score first (branches without one last)")
}

// listEntry is a branch of list --json: the branch object and its meta.
type listEntry struct {
	branches.Info
	// UniqueBytes: content only this branch references (live and
	// invalidated branches; see branches.SpaceReport).
	UniqueBytes  *int64            `json:"unique_bytes,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Score        *float64          `json:"score,omitempty"`
	LeaseExpires *time.Time        `json:"lease_expires,omitempty"`
}

// applyMeta filters and sorts infos by the meta flags and returns them
// with their meta.
func (o *listMetaOptions) applyMeta(ctx context.Context, be control.Backend, infos []branches.Info) ([]listEntry, error) {
	want := map[string]string{}
	for _, l := range o.Labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usagef("--label %q: want k=v", l)
		}
		want[k] = v
	}
	if o.Sort != "" && o.Sort != "score" {
		return nil, usagef("--sort %q: only score", o.Sort)
	}
	metas := map[string]branches.Meta{}
	if mb, ok := be.(control.MetaBackend); ok {
		all, err := mb.Metas(ctx)
		switch {
		case errors.Is(err, control.ErrBadRequest):
			// A server that keeps no meta: no branch has any.
		case err != nil:
			return nil, err
		default:
			metas = all
		}
	}
	out := make([]listEntry, 0, len(infos))
	for _, in := range infos {
		e := listEntry{Info: in}
		if in.State == branches.StateLive {
			md := metas[in.Name]
			e.Labels, e.Score, e.LeaseExpires = md.Labels, md.Score, md.LeaseExpires
		}
		match := true
		for k, v := range want {
			if e.Labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, e)
		}
	}
	if o.Sort == "score" {
		sort.SliceStable(out, func(i, j int) bool {
			a, b := out[i].Score, out[j].Score
			return a != nil && (b == nil || *a > *b)
		})
	}
	return out, nil
}

// printScored prints entries as a flat table in their order.
func printScored(w io.Writer, es []listEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BRANCH\tSTATE\tSCORE\tLABELS")
	for _, e := range es {
		score := "-"
		if e.Score != nil {
			score = fmt.Sprintf("%g", *e.Score)
		}
		var ls []string
		for k, v := range e.Labels {
			ls = append(ls, k+"="+v)
		}
		sort.Strings(ls)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.State, score, strings.Join(ls, ","))
	}
	tw.Flush()
}

func entryInfos(es []listEntry) []branches.Info {
	out := make([]branches.Info, len(es))
	for i, e := range es {
		out[i] = e.Info
	}
	return out
}

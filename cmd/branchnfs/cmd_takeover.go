package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

type takeoverOptions struct {
	nameOptions
	Abort bool
}

func newTakeoverCommand(g *globalOptions) *cobra.Command {
	opts := &takeoverOptions{nameOptions: nameOptions{globalOptions: g}}
	cmd := &cobra.Command{
		Use:   "takeover NAME",
		Short: "Make this server the owner of branch NAME, whose server is gone",
		Long: `When several servers share a store (metadata on etcd), each live branch is
written through one of them, its owner: the one that forked it. When that
server dies its lease on etcd expires (--lease-ttl after it stopped
answering, 10s by default) and the branch has no owner: takeover makes
this server (the one serving --store) its owner, so its files take writes
here and it can be committed here. Everything the old owner acknowledged
is there. Refused while the owner runs (exit 15, the owner is named).
--abort discards the branch instead (as abort does).`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runTakeover(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	cmd.Flags().BoolVar(&opts.Abort, "abort", false, "abort the branch (and its descendants) instead of taking it over")
	return cmd
}

func runTakeover(ctx context.Context, o *takeoverOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		if o.Abort {
			return abortWith(ctx, b, &o.nameOptions, true)
		}
		t, ok := b.Backend.(control.Takeoverer)
		if !ok {
			return errors.New("this backend cannot take branches over")
		}
		in, err := t.Takeover(ctx, o.Name)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.stdout, in)
		}
		fmt.Fprintf(o.stdout, "took over %s: it takes writes through this server\n", in.Name)
		return nil
	})
}

// etcdLeases gives branches the leases of an etcdkv.Coord.
type etcdLeases struct{ c *etcdkv.Coord }

func (e etcdLeases) Grant(ctx context.Context, ttl time.Duration) (branches.Lease, error) {
	l, err := e.c.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (e etcdLeases) Revoke(ctx context.Context, id int64) error { return e.c.Revoke(ctx, id) }

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

type gcOptions struct {
	*globalOptions
	JSON bool
}

func newGCCommand(g *globalOptions) *cobra.Command {
	opts := &gcOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Give the disk space of discarded data back; prints the store's size before and after",
		Long: `Delete what no branch or checkpoint reaches any more (aborted branches,
versions shadowed by commits) and give its disk space back, then print the
space the store occupies before and after. The server does this by itself
after enough data was discarded; branches stay usable meanwhile.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGC(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	return cmd
}

func runGC(ctx context.Context, o *gcOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		c, ok := b.Backend.(control.Collector)
		if !ok {
			return errors.New("this backend cannot give disk space back")
		}
		res, err := c.GC(ctx)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.stdout, res)
		}
		fmt.Fprintf(o.stdout, "rechunked %d blocks into %d new chunks (%s read)\n",
			res.Rechunk.Blocks, res.Rechunk.Chunks, kv.FormatBytes(uint64(max(res.Rechunk.Bytes, 0))))
		freed := res.DiskBefore - res.DiskAfter
		fmt.Fprintf(o.stdout, "store on disk: %s before, %s after (%s freed)\n",
			kv.FormatBytes(uint64(max(res.DiskBefore, 0))), kv.FormatBytes(uint64(max(res.DiskAfter, 0))), signedBytes(freed))
		fmt.Fprintf(o.stdout, "deleted %d blocks and %d layers, pruned %d hidden block references, rewrote %d log files\n",
			res.Reclaim.Blocks, res.Reclaim.Layers, res.Pruned, res.Rewrites)
		return nil
	})
}

func signedBytes(n int64) string {
	if n < 0 {
		return "-" + kv.FormatBytes(uint64(-n))
	}
	return kv.FormatBytes(uint64(n))
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

// withBackend runs fn against the server's API or the store, and closes it.
func withBackend(ctx context.Context, g *globalOptions, fn func(b *backend) error) (err error) {
	b, err := g.openBackend(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}()
	return fn(b)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fork

type forkOptions struct {
	*globalOptions
	JSON       bool
	Checkpoint string
	Parent     string
	Name       string
}

func newForkCommand(g *globalOptions) *cobra.Command {
	opts := &forkOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "fork PARENT NAME",
		Short: "Fork branch PARENT into a new branch NAME; prints its export path",
		Long: `Fork branch PARENT into a new branch NAME and print NAME's NFS export
path (/NAME). The fork sees PARENT exactly as it is now; later writes to
PARENT do not show in it. With --checkpoint LABEL, fork from that checkpoint
of PARENT instead.`,
		Args: exactArgs("PARENT", "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Parent, opts.Name = args[0], args[1]
			return runFork(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func (o *forkOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the new branch as JSON")
	cmd.Flags().StringVar(&o.Checkpoint, "checkpoint", "", "fork from this checkpoint of PARENT")
}

func runFork(ctx context.Context, o *forkOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		var err error
		var res control.ForkResult
		if o.Checkpoint != "" {
			res.Info, err = b.ForkCheckpoint(ctx, o.Parent, o.Checkpoint, o.Name)
		} else {
			res.Info, err = b.Fork(ctx, o.Parent, o.Name)
		}
		if err != nil {
			return err
		}
		res.Export = control.ExportPath(res.Name)
		if o.JSON {
			return writeJSON(o.stdout, res)
		}
		fmt.Fprintln(o.stdout, res.Export)
		return nil
	})
}

// commit

type nameOptions struct {
	*globalOptions
	JSON  bool
	Force bool // commit and abort: even if NFS clients use the branch
	Name  string
}

func (o *nameOptions) addForceFlag(cmd *cobra.Command, what string) {
	cmd.Flags().BoolVar(&o.Force, "force", false, what+" even if NFS clients have the branch mounted or use its files")
}

func (o *nameOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the result as JSON")
}

func newCommitCommand(g *globalOptions) *cobra.Command {
	opts := &nameOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "commit NAME",
		Short: "Apply branch NAME's changes to its parent, atomically",
		Long: `Apply branch NAME's changes to its parent, all or nothing. Live siblings of
NAME are invalidated (first commit wins). Refused when a path changed on
both sides (the conflicting paths are listed), when NAME has live
children, or when NFS clients use NAME (they mounted /NAME, or used its
files in the last minute; exit 14, the clients are named): unmount
first, or pass --force.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommit(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	opts.addForceFlag(cmd, "commit")
	return cmd
}

func runCommit(ctx context.Context, o *nameOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		commit := b.Commit
		if o.Force && b.client != nil {
			commit = b.client.ForceCommit
		}
		res, err := commit(ctx, o.Name)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.stdout, res)
		}
		if res.FastPath {
			fmt.Fprintf(o.stdout, "committed %s into %s (fast path: the parent had not changed)\n", res.Branch, res.Parent)
		} else {
			fmt.Fprintf(o.stdout, "committed %s into %s (merged %d path(s))\n", res.Branch, res.Parent, res.MergedPaths)
		}
		if len(res.Invalidated) > 0 {
			fmt.Fprintf(o.stdout, "invalidated: %s\n", strings.Join(res.Invalidated, ", "))
		}
		return nil
	})
}

// abort

func newAbortCommand(g *globalOptions) *cobra.Command {
	opts := &nameOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "abort NAME",
		Short: "Discard branch NAME and its descendants",
		Long: `Discard branch NAME and its descendants. Refused when NFS clients use NAME
(they mounted /NAME, or used its files in the last minute; exit 14, the
clients are named): unmount first, or pass --force.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runAbort(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	opts.addForceFlag(cmd, "abort")
	return cmd
}

func runAbort(ctx context.Context, o *nameOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error { return abortWith(ctx, b, o, o.Force) })
}

// abortWith aborts branch o.Name through b (past its NFS clients if
// force) and prints what it aborted.
func abortWith(ctx context.Context, b *backend, o *nameOptions, force bool) error {
	abort := b.Abort
	if force && b.client != nil {
		abort = b.client.ForceAbort
	}
	res, err := abort(ctx, o.Name)
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(o.stdout, res)
	}
	fmt.Fprintf(o.stdout, "aborted %s\n", strings.Join(res.Aborted, ", "))
	return nil
}

// checkpoint and restore

type labelOptions struct {
	nameOptions
	Label string
}

func newCheckpointCommand(g *globalOptions) *cobra.Command {
	opts := &labelOptions{nameOptions: nameOptions{globalOptions: g}}
	cmd := &cobra.Command{
		Use:   "checkpoint NAME LABEL",
		Short: "Freeze branch NAME as the immutable checkpoint LABEL",
		Args:  exactArgs("NAME", "LABEL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Label = args[0], args[1]
			return runCheckpoint(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func runCheckpoint(ctx context.Context, o *labelOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		cp, err := b.Checkpoint(ctx, o.Name, o.Label)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.stdout, cp)
		}
		fmt.Fprintf(o.stdout, "checkpoint %s of %s\n", cp.Label, cp.Branch)
		return nil
	})
}

func newRestoreCommand(g *globalOptions) *cobra.Command {
	opts := &labelOptions{nameOptions: nameOptions{globalOptions: g}}
	cmd := &cobra.Command{
		Use:   "restore NAME LABEL",
		Short: "Roll branch NAME back to its checkpoint LABEL",
		Args:  exactArgs("NAME", "LABEL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Label = args[0], args[1]
			return runRestore(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func runRestore(ctx context.Context, o *labelOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		if err := b.Restore(ctx, o.Name, o.Label); err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.stdout, control.RestoreResult{Branch: o.Name, Label: o.Label})
		}
		fmt.Fprintf(o.stdout, "restored %s to checkpoint %s\n", o.Name, o.Label)
		return nil
	})
}

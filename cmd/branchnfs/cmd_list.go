package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/results"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

type listOptions struct {
	*globalOptions
	listMetaOptions
	JSON bool
	All  bool
}

func newListCommand(g *globalOptions) *cobra.Command {
	opts := &listOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show the tree of branches with state, fork time, bytes changed and unique bytes",
		Long: `Show the tree of branches with their state, fork time, the data bytes
written since the fork, and their unique bytes: the content only that
branch references, which aborting it gives back. Live and invalidated
branches are shown; --all also shows committed and aborted ones. --json
prints an array of branch objects (see README.md).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runList(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func (o *listOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print a JSON array of branches")
	cmd.Flags().BoolVar(&o.All, "all", false, "include committed and aborted branches")
	o.listMetaOptions.AddFlags(cmd)
}

func runList(ctx context.Context, o *listOptions) error {
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		infos, err := b.List(ctx)
		if err != nil {
			return err
		}
		if !o.All {
			kept := infos[:0]
			for _, in := range infos {
				if in.State == branches.StateLive || in.State == branches.StateInvalidated {
					kept = append(kept, in)
				}
			}
			infos = kept
		}
		entries, err := o.applyMeta(ctx, b.Backend, infos)
		if err != nil {
			return err
		}
		unique := uniqueBytes(ctx, b, o.stderr)
		for i, e := range entries {
			if n, ok := unique[e.Name]; ok && (e.State == branches.StateLive || e.State == branches.StateInvalidated) {
				entries[i].UniqueBytes = &n
			}
		}
		switch {
		case o.JSON:
			return writeJSON(o.stdout, entries)
		case o.Sort != "":
			printScored(o.stdout, entries)
		default:
			printTree(o.stdout, entryInfos(entries), unique)
		}
		return nil
	})
}

// uniqueBytes returns each live or invalidated branch's unique bytes, or
// nil, with a note on stderr, when the backend cannot tell: the rest of
// the list is still worth printing.
func uniqueBytes(ctx context.Context, b *backend, stderr io.Writer) map[string]int64 {
	sr, ok := b.Backend.(control.SpaceReporter)
	if !ok {
		return nil
	}
	u, err := sr.UniqueBytes(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "branchnfs: unique bytes left out: %v\n", err)
		return nil
	}
	return u
}

// printTree prints branches as a tree: children under their parent, in
// fork order, with their unique bytes when unique is not nil.
func printTree(w io.Writer, infos []branches.Info, unique map[string]int64) {
	byID := make(map[branches.BranchID]bool, len(infos))
	for _, in := range infos {
		byID[in.ID] = true
	}
	children := make(map[branches.BranchID][]branches.Info)
	var roots []branches.Info
	for _, in := range infos {
		if in.ParentID != 0 && byID[in.ParentID] {
			children[in.ParentID] = append(children[in.ParentID], in)
		} else {
			roots = append(roots, in)
		}
	}
	order := func(s []branches.Info) {
		sort.Slice(s, func(i, j int) bool {
			if !s[i].ForkTime.Equal(s[j].ForkTime) {
				return s[i].ForkTime.Before(s[j].ForkTime)
			}
			return s[i].ID < s[j].ID
		})
	}
	order(roots)
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	if unique != nil {
		fmt.Fprintln(tw, "BRANCH\tSTATE\tFORKED\tCHANGED\tUNIQUE\tNOTE")
	} else {
		fmt.Fprintln(tw, "BRANCH\tSTATE\tFORKED\tCHANGED\tNOTE")
	}
	var walk func(in branches.Info, prefix, branch string)
	walk = func(in branches.Info, prefix, branch string) {
		forked := "-"
		if in.Depth > 0 && !in.ForkTime.IsZero() {
			forked = in.ForkTime.Local().Format(time.DateTime)
		}
		var notes []string
		if in.ForkedFrom != "" {
			notes = append(notes, "from checkpoint "+in.ForkedFrom)
		}
		if in.InvalidatedBy != "" {
			notes = append(notes, "by "+in.InvalidatedBy)
		}
		if len(in.Checkpoints) > 0 {
			notes = append(notes, "checkpoints: "+strings.Join(in.Checkpoints, ", "))
		}
		changed := humanBytes(in.BytesChanged)
		if unique != nil {
			u := "-"
			if n, ok := unique[in.Name]; ok && (in.State == branches.StateLive || in.State == branches.StateInvalidated) {
				u = humanBytes(n)
			}
			changed += "\t" + u
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\n", branch, in.Name, in.State, forked, changed, strings.Join(notes, "; "))
		kids := children[in.ID]
		order(kids)
		for i, k := range kids {
			if i == len(kids)-1 {
				walk(k, prefix+"   ", prefix+"└─ ")
			} else {
				walk(k, prefix+"│  ", prefix+"├─ ")
			}
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	tw.Flush()
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if line != "" {
			fmt.Fprintln(w, strings.TrimRight(line, " \n"))
		}
	}
}

// humanBytes formats n with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// diff

type diffOptions struct {
	*globalOptions
	JSON  bool
	Patch bool
	Since string
	Name  string
}

func newDiffCommand(g *globalOptions) *cobra.Command {
	opts := &diffOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "diff NAME",
		Short: "List what branch NAME changed since its fork",
		Long: `List the paths branch NAME added (A), modified (M) and deleted (D) since its
fork, with byte counts. Names on the store's ignore list (by default ._*,
.DS_Store and .nfs.*; see init --ignore) and silly-renamed files are left
out. Names that are not printable ASCII are quoted as git quotes them
(core.quotePath); --json prints the diff object with the names exact
(see README.md). What changed under .git is one line (G): where HEAD
moved, how many refs changed and objects were added.

--patch prints the changes as a git patch instead, which git apply
applies to a checkout of the fork base: text hunks, new and deleted
files, mode changes, symlinks and binary files (GIT binary patch);
.git is left out. --since LABEL measures from the branch's checkpoint
LABEL instead of the fork.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runDiff(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the diff as JSON")
	cmd.Flags().BoolVar(&opts.Patch, "patch", false, "print a git patch (git apply applies it to the fork base)")
	cmd.Flags().StringVar(&opts.Since, "since", "", "with --patch: the changes since this checkpoint of NAME")
	return cmd
}

func runDiff(ctx context.Context, o *diffOptions) error {
	if o.Patch && o.JSON {
		return usagef("--patch and --json exclude each other")
	}
	if o.Since != "" && !o.Patch {
		return usagef("--since needs --patch (the listing is since the fork)")
	}
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		if o.Patch {
			out, err := outputsOf(b)
			if err != nil {
				return err
			}
			bw := bufio.NewWriter(o.stdout)
			if _, err := out.Patch(ctx, o.Name, o.Since, bw); err != nil {
				return err
			}
			return bw.Flush()
		}
		d, err := b.Diff(ctx, o.Name)
		if err != nil {
			return err
		}
		if o.JSON {
			if d.Changes == nil {
				d.Changes = []branches.Change{}
			}
			return writeJSON(o.stdout, d)
		}
		printDiff(o.stdout, d)
		return nil
	})
}

func printDiff(w io.Writer, d branches.Diff) {
	var added, modified, deleted int
	var total int64
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range d.Changes {
		k := "?"
		switch c.Kind {
		case branches.Added:
			k = "A"
			added++
		case branches.Modified:
			k = "M"
			modified++
		case branches.Deleted:
			k = "D"
			deleted++
		}
		total += c.Bytes
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k, c.Type, humanBytes(c.Bytes), results.QuotePath(c.Path))
	}
	if d.Git != nil {
		fmt.Fprintf(tw, "G\tgit\t%s\t.git: %s\n", humanBytes(d.Git.Bytes), d.Git)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d change(s) in %s since its fork from %s: %d added, %d modified, %d deleted, %s\n",
		len(d.Changes), d.Branch, orDash(d.Parent), added, modified, deleted, humanBytes(total))
}

// outputsOf returns what writes patches, change sets and exports: the
// server's API or the store opened directly.
func outputsOf(b *backend) (control.Outputs, error) {
	out, ok := b.Backend.(control.Outputs)
	if !ok {
		return nil, errors.New("this backend cannot write patches or exports")
	}
	return out, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

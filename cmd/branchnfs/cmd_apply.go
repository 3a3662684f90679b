package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/branchnfs/branchnfs/branches/results"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// errApplyConflict is an apply refused because the folder changed paths
// the branch changed too (exit code exitApplyConflict).
var errApplyConflict = errors.New("apply refused: conflicts")

// applyPauseEnv, when set to N, makes apply stop after N steps of
// moving content into place, as a kill -9 would find it (tests).
const applyPauseEnv = "BRANCHNFS_TEST_APPLY_PAUSE"

type applyOptions struct {
	*globalOptions
	To        string
	DryRun    bool
	JSON      bool
	Since     string
	GitBranch string
	Name      string
}

func newApplyCommand(g *globalOptions) *cobra.Command {
	opts := &applyOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "apply NAME [--to DIR] [--dry-run] [--since LABEL] | apply NAME [--to REPO] --git-branch REF",
		Short: "Write what branch NAME changed since its fork into a folder, three-way safe",
		Long: `Write what branch NAME changed since its fork (or since its checkpoint
LABEL with --since) into the folder DIR: content, modes, symlinks, new
and removed directories, deletions and mtimes. DIR defaults to the
folder main was imported from (init or serve --from), which the store
records.

It is a three-way apply: every path the branch changed must still hold
its state at the fork in DIR (or already the branch's). Any other path
is a conflict: nothing at all is written, the conflicts are listed with
their reason, and apply exits 16. --dry-run lists the changes and the
conflicts and writes nothing.

New content is staged in DIR/` + results.StageDir + ` first; then each path is
moved into place, its original kept there until the end. If apply is
cut short (a crash, kill -9, a full disk), every path holds its old or
its new state, and the next apply into DIR completes the cut apply (or
undoes it, if it had not started moving) and says which.

.git is left alone: with --git-branch REF, DIR is a git repository and
the branch's changes become a commit on the new ref REF (the working
tree and index are not touched), on top of the commits the branch made
in its own .git.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runApply(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.To, "to", "", "the folder to apply to (default: the folder main was imported from)")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "list the changes and conflicts, write nothing")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&opts.Since, "since", "", "apply the changes since this checkpoint of NAME instead of since the fork")
	cmd.Flags().StringVar(&opts.GitBranch, "git-branch", "", "make the changes a commit on the new ref REF of the git repository --to, instead of writing files")
	return cmd
}

// applyResult is apply's --json output.
type applyResult struct {
	Branch string `json:"branch"`
	To     string `json:"to"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Recovered tells what was done first about an earlier apply into
	// the folder that was cut short.
	Recovered *results.Recovered `json:"recovered,omitempty"`
	results.Plan
}

func runApply(ctx context.Context, o *applyOptions) error {
	if o.To == "" {
		dir, err := recordedSourceDir(ctx, o.globalOptions)
		if err != nil {
			return err
		}
		if dir == "" {
			return usagef("no recorded source folder: pass --to DIR")
		}
		o.To = dir
	}
	if o.GitBranch != "" {
		return runApplyGit(ctx, o)
	}
	root, err := os.OpenRoot(o.To)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	defer root.Close()
	if !o.DryRun {
		// One apply into a folder at a time: a second one would take the
		// first's staging for a cut apply's.
		unlock, err := lockDir(o.To)
		if err != nil {
			return err
		}
		defer unlock()
	}
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		out, err := outputsOf(b)
		if err != nil {
			return err
		}
		res := applyResult{Branch: o.Name, To: o.To, DryRun: o.DryRun}
		ap := &results.Applier{Root: root, Branch: o.Name}
		if n, _ := strconv.Atoi(os.Getenv(applyPauseEnv)); n > 0 {
			ap.AfterStep = func(done int) {
				if done == n {
					fmt.Fprintf(o.stderr, "apply paused after %d steps\n", n)
					for {
						time.Sleep(time.Hour)
					}
				}
			}
		}
		if o.DryRun {
			if _, err := root.Lstat(results.StageDir); err == nil {
				fmt.Fprintf(o.stderr, "branchnfs: an earlier apply into %s was cut short (%s): the next apply completes or undoes it first\n", o.To, results.StageDir)
			}
		} else {
			if res.Recovered, err = ap.Recover(); err != nil {
				return err
			}
			if res.Recovered != nil && !o.JSON {
				fmt.Fprintf(o.stdout, "an earlier apply of %s into %s was cut short: %s it\n", orDash(res.Recovered.Branch), o.To, res.Recovered.Action)
			}
		}
		deltas, err := readChangeSet(ctx, out, o.Name, o.Since)
		if err != nil {
			return err
		}
		plan, err := results.PlanApply(root, deltas, results.PlanOptions{})
		if err != nil {
			return fmt.Errorf("apply: reading %s: %w", o.To, err)
		}
		res.Plan = *plan
		if len(plan.Conflicts) > 0 || o.DryRun {
			return o.printApply(res)
		}
		err = ap.Run(plan, func(fn func(d results.Delta, r io.Reader) error) error {
			return streamChangeSet(ctx, out, o.Name, o.Since, true, fn)
		})
		if err != nil {
			return err
		}
		return o.printApply(res)
	})
}

// recordedSourceDir returns the folder main was imported from: from the
// running server's status, else from the store; "" when none is
// recorded.
func recordedSourceDir(ctx context.Context, g *globalOptions) (dir string, err error) {
	err = withBackend(ctx, g, func(b *backend) error {
		if b.client != nil {
			dir = b.status.SourceDir
			return nil
		}
		dir, err = b.store.mgr.SourceDir(ctx)
		return err
	})
	return dir, err
}

// readChangeSet returns branch name's deltas since its fork (or its
// checkpoint since), without content.
func readChangeSet(ctx context.Context, out control.Outputs, name, since string) ([]results.Delta, error) {
	var deltas []results.Delta
	err := streamChangeSet(ctx, out, name, since, false, func(d results.Delta, _ io.Reader) error {
		deltas = append(deltas, d)
		return nil
	})
	return deltas, err
}

// streamChangeSet reads branch name's change set and calls fn for each
// delta.
func streamChangeSet(ctx context.Context, out control.Outputs, name, since string, content bool, fn func(d results.Delta, r io.Reader) error) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := out.ChangeSet(ctx, name, since, content, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	rerr := results.ReadChangeSet(pr, fn)
	if rerr == nil {
		_, rerr = io.Copy(io.Discard, pr) // the tar stream's end
	}
	pr.CloseWithError(errExtractStopped)
	err := <-errc
	if rerr != nil {
		if err != nil && !errors.Is(err, errExtractStopped) {
			return err
		}
		return rerr
	}
	return err
}

func (o *applyOptions) printApply(res applyResult) error {
	conflicts := len(res.Conflicts)
	if o.JSON {
		if res.Changes == nil {
			res.Changes = []results.Delta{}
		}
		if err := writeJSON(o.stdout, res); err != nil {
			return err
		}
	} else {
		for _, c := range res.Conflicts {
			fmt.Fprintf(o.stdout, "C  %s: %s\n", results.QuotePath(c.Path), c.Reason)
		}
		if conflicts == 0 {
			for _, d := range res.Changes {
				k := map[string]string{"added": "A", "modified": "M", "deleted": "D"}[d.Kind()]
				fmt.Fprintf(o.stdout, "%s  %s\n", k, results.QuotePath(d.Path))
			}
		}
		verb := "applied"
		if res.DryRun {
			verb = "would apply"
		}
		switch {
		case conflicts > 0:
			fmt.Fprintf(o.stdout, "%d conflict(s) between %s and %s: nothing was written\n", conflicts, res.Branch, res.To)
		default:
			fmt.Fprintf(o.stdout, "%s %d change(s) of %s to %s", verb, len(res.Changes), res.Branch, res.To)
			if n := len(res.Already); n > 0 {
				fmt.Fprintf(o.stdout, " (%d already there)", n)
			}
			if n := len(res.Skipped); n > 0 {
				fmt.Fprintf(o.stdout, " (%d left alone: .git, FIFOs, sockets, devices)", n)
			}
			fmt.Fprintln(o.stdout)
			for _, p := range res.Skipped {
				if results.InGit(p) {
					fmt.Fprintf(o.stdout, "the branch changed .git too (commits?): apply %s --to REPO --git-branch REF brings them as a ref\n", res.Branch)
					break
				}
			}
		}
	}
	if conflicts > 0 {
		return fmt.Errorf("%w: %d path(s) of %s changed in %s too; nothing was written", errApplyConflict, conflicts, res.Branch, res.To)
	}
	return nil
}

// lockDir takes an exclusive flock on the directory dir itself (no file
// is left in it), or fails at once if another process holds it.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("apply: another apply is writing into %s: wait for it to end", dir)
		}
		return nil, fmt.Errorf("apply: locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

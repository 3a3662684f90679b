package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/branchnfs/branchnfs/attempt/runner"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

// exitStatusError makes the process exit with code, printing nothing: the
// status of the command an attempt ran.
type exitStatusError struct{ code int }

func (e *exitStatusError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// attemptOptions are the flags of exec, race and best-of.
type attemptOptions struct {
	*globalOptions
	JSON    bool
	Timeout time.Duration
	Grace   time.Duration
	Lease   time.Duration
	Mount   string
	// WorkdirRoot replaces <mount>/<branch> with WorkdirRoot/<branch>, a
	// plain directory. Hidden, for tests on hosts without an NFS client:
	// no file handle of a plain directory is fenced.
	WorkdirRoot string
}

func (o *attemptOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the outcome as JSON")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 0, "kill an attempt (fence, SIGTERM, SIGKILL) after this long; 0: no limit")
	cmd.Flags().DurationVar(&o.Grace, "grace", 2*time.Second, "time between SIGTERM and SIGKILL")
	cmd.Flags().DurationVar(&o.Lease, "lease", 30*time.Second, "lease kept (renewed) on each attempt's branch: if this command dies, the server aborts the branch when it expires")
	cmd.Flags().StringVar(&o.Mount, "mount", "", "a mount of the export / (default $BRANCHNFS_MOUNT, else the server's serve --mount)")
	cmd.Flags().StringVar(&o.WorkdirRoot, "workdir-root", "", "testing only: run in DIR/BRANCH, a plain directory, instead of the mount")
	cmd.Flags().MarkHidden("workdir-root")
}

// runnerOptions opens the backend and finds where attempts run. The caller
// must close the backend.
func (o *attemptOptions) runnerOptions(ctx context.Context) (runner.Options, *backend, error) {
	if o.Grace < 0 || o.Timeout < 0 {
		return runner.Options{}, nil, usagef("--grace and --timeout must not be negative")
	}
	if o.Lease < 3*time.Millisecond {
		return runner.Options{}, nil, usagef("--lease %v: want at least 3ms (it is renewed every third of it)", o.Lease)
	}
	b, err := o.openBackend(ctx)
	if err != nil {
		return runner.Options{}, nil, err
	}
	dir, _ := o.storeDir()
	ro := runner.Options{Backend: attemptBackend{b}, Store: dir, Grace: o.Grace, Timeout: o.Timeout, Lease: o.Lease}
	if o.WorkdirRoot != "" {
		root, err := filepath.Abs(o.WorkdirRoot)
		if err != nil {
			b.Close()
			return ro, nil, err
		}
		ro.Workdir = func(branch string) (string, error) {
			d := filepath.Join(root, branch)
			return d, os.MkdirAll(d, 0o755)
		}
		return ro, b, nil
	}
	mnt, err := o.findMount(b)
	if err != nil {
		b.Close()
		return ro, nil, err
	}
	ro.Workdir = func(branch string) (string, error) { return branchDir(mnt, branch) }
	return ro, b, nil
}

// findMount returns the mount of the export / that attempts run in, or an
// errMountFailed saying how to get one.
func (o *attemptOptions) findMount(b *backend) (string, error) {
	mnt := o.Mount
	if mnt == "" {
		mnt = os.Getenv("BRANCHNFS_MOUNT")
	}
	if mnt == "" && b.client != nil {
		mnt = b.status.Mount
	}
	if mnt == "" {
		why := "the server mounts nothing"
		if b.client == nil {
			why = "no server runs on this store"
		}
		return "", fmt.Errorf("%w: attempts run in a mount of the export / and %s; start the server with `branchnfs serve --mount DIR` (Linux: as root, or with an /etc/fstab \"user\" entry for DIR, see `branchnfs mount / DIR --print`), or mount / yourself and pass --mount DIR or $BRANCHNFS_MOUNT",
			errMountFailed, why)
	}
	abs, err := filepath.Abs(mnt)
	if err != nil {
		return "", err
	}
	if !isMountPoint(abs) {
		return "", fmt.Errorf("%w: %s is not a mount point: mount the export / there first (`branchnfs mount / %s`), or start the server with `branchnfs serve --mount %s`",
			errMountFailed, abs, shellQuote(abs), shellQuote(abs))
	}
	return abs, nil
}

// isMountPoint reports whether dir is on another device than its parent.
func isMountPoint(dir string) bool {
	var a, p syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &p) != nil {
		return false
	}
	return a.Dev != p.Dev
}

// branchDir is <mount>/<branch>, which must be a directory.
func branchDir(mnt, branch string) (string, error) {
	d := filepath.Join(mnt, branch)
	fi, err := os.Stat(d)
	if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: branch %s does not show in the mount %s (%v): is %s a mount of this server's export /?", errMountFailed, branch, mnt, err, mnt)
	}
	return d, nil
}

// stdFile returns w as an *os.File for a child process, or a pipe copied
// into w (in-process tests pass buffers); wait waits for the copy.
func stdFile(w io.Writer) (f *os.File, done func(), err error) {
	if f, ok := w.(*os.File); ok {
		return f, func() {}, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{})
	go func() { io.Copy(w, r); r.Close(); close(ch) }()
	return pw, func() { pw.Close(); <-ch }, nil
}

// exec

type execOptions struct {
	attemptOptions
	OnExit string
	Branch string
	Argv   []string
}

func newExecCommand(g *globalOptions) *cobra.Command {
	opts := &execOptions{attemptOptions: attemptOptions{globalOptions: g}}
	cmd := &cobra.Command{
		Use:   "exec BRANCH [flags] -- CMD [ARGS...]",
		Short: "Run a command in a branch, supervised; commit, abort or keep the branch after",
		Long: `Run CMD in branch BRANCH: its working directory is BRANCH's directory in a
mount of the export / (serve --mount DIR, --mount, or $BRANCHNFS_MOUNT), and
it gets BRANCHNFS_BRANCH, BRANCHNFS_PARENT, BRANCHNFS_ATTEMPT and
BRANCHNFS_STORE. It runs in its own session and process group, under a
subreaper that catches double-forked grandchildren (Linux), in a cgroup v2
subtree where one is delegated to you (Linux).

When CMD exits, what it left running gets --grace, then is killed, and:
  --on-exit commit  flush the mount, commit on exit 0; abort otherwise
  --on-exit abort   abort
  --on-exit keep    leave the branch live (the default)
On --timeout, Ctrl-C, or when the branch is aborted or invalidated from
elsewhere, the branch is fenced first (aborted: its files answer ESTALE),
then the tree gets SIGTERM, --grace, SIGKILL, and exec waits until every
process is gone.

The exit status is CMD's own, or 128+N when signal N killed it; a refused
commit exits with its own code (6 invalidated, 7 conflict, 8 children).
Without a mount it exits 13. --json prints one record (README.md) as the
last line of stdout.`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != 1 || len(args) < 2 {
				return usagef("exec needs BRANCH, then -- and the command: branchnfs exec BRANCH -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Branch, opts.Argv = args[0], args[1:]
			return runExec(cmd.Context(), opts)
		},
	}
	opts.attemptOptions.AddFlags(cmd)
	cmd.Flags().StringVar(&opts.OnExit, "on-exit", runner.OnExitKeep, "commit, abort or keep: what to do with the branch when the command exits")
	return cmd
}

func runExec(ctx context.Context, o *execOptions) error {
	if err := runner.CheckOnExit(o.OnExit); err != nil {
		return usagef("--%v", err)
	}
	ro, b, err := o.runnerOptions(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	out, waitOut, err := stdFile(o.stdout)
	if err != nil {
		return err
	}
	errf, waitErr, err := stdFile(o.stderr)
	if err != nil {
		waitOut()
		return err
	}
	ro.Stdin, ro.Stdout, ro.Stderr = os.Stdin, out, errf
	// Ctrl-C is the supervisor's to act on (fence, then end the tree);
	// the run must go on after ctx is cancelled to clean up.
	rec, err := runner.Exec(ctx, ro, o.Branch, o.OnExit, o.Argv)
	waitOut()
	waitErr()
	if err != nil {
		return err
	}
	if o.JSON {
		// One line, the last of stdout, after the command's own output.
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := o.stdout.Write(append(b, '\n')); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(o.stderr, "branchnfs: exec %s: %s\n", o.Branch, describe(rec))
	}
	if rec.Err() != nil {
		return rec.Err()
	}
	if c := rec.ExitStatus(); c != 0 {
		return &exitStatusError{code: c}
	}
	return nil
}

// describe is a one-line account of a record.
func describe(r runner.Record) string {
	var s string
	switch {
	case r.Signal != 0:
		s = fmt.Sprintf("killed by signal %d", r.Signal)
	default:
		s = fmt.Sprintf("exit %d", r.ExitCode)
	}
	if r.KilledBy != "" {
		s += " (" + r.KilledBy + ")"
	}
	s += ", branch " + string(r.State)
	if r.Commit != nil {
		s += " into " + r.Commit.Parent
	}
	if r.Error != "" {
		s += ": " + r.Error
	}
	if r.Supervision.Fallback != "" && r.Supervision.Isolation != "cgroup" {
		s += " [no cgroup: " + r.Supervision.Fallback + "]"
	}
	return s
}

// race and best-of

type raceOptions struct {
	attemptOptions
	N      int
	Cmds   []string
	Check  string
	Parent string
	Argv   []string
}

func newRaceCommand(g *globalOptions) *cobra.Command {
	opts := &raceOptions{attemptOptions: attemptOptions{globalOptions: g}}
	cmd := &cobra.Command{
		Use:   "race PARENT (-n N -- CMD [ARGS...] | -c CMD1 -c CMD2 ...)",
		Short: "Run attempts in children of PARENT; the first to succeed commits, the rest are killed",
		Long: `Fork one child of PARENT per attempt (PARENT-ID-I) and run the attempts in
parallel, each as exec runs it: -n N runs the command after -- N times; -c
runs each shell command given (sh -c). The first attempt that exits 0, and
whose --check (sh -c, run in its branch) exits 0, is flushed and committed.
The commit invalidates its siblings in the same transaction, so their
files answer ESTALE from then on; then their trees get SIGTERM, --grace,
SIGKILL, and race waits until every process is gone. Failed and losing
attempts are aborted. Each attempt's output goes to STORE/attempts/BRANCH.log.

It prints one record per attempt (a table, or --json: an array) and exits 0
when an attempt committed, 1 when none did.`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if len(args) < 1 || dash == 0 || (dash < 0 && len(args) != 1) {
				return usagef("race needs PARENT, then -n N -- CMD or -c CMD ...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Parent, opts.Argv = args[0], args[1:]
			return runRace(cmd.Context(), opts)
		},
	}
	opts.attemptOptions.AddFlags(cmd)
	cmd.Flags().IntVarP(&opts.N, "n", "n", 0, "number of attempts of the command after --")
	cmd.Flags().StringArrayVarP(&opts.Cmds, "cmd", "c", nil, "a shell command for one attempt (repeat)")
	cmd.Flags().StringVar(&opts.Check, "check", "", "shell command run in a successful attempt's branch; it wins only if this exits 0")
	return cmd
}

// commands builds the attempts' command lines from -n/-- or -c.
func attemptCommands(n int, argv, cmds []string) ([][]string, error) {
	switch {
	case len(cmds) > 0 && (n > 0 || len(argv) > 0):
		return nil, usagef("give either -n N -- CMD or -c CMD ..., not both")
	case len(cmds) > 0:
		out := make([][]string, len(cmds))
		for i, c := range cmds {
			out[i] = []string{"/bin/sh", "-c", c}
		}
		return out, nil
	case n > 0 && len(argv) > 0:
		out := make([][]string, n)
		for i := range out {
			out[i] = argv
		}
		return out, nil
	}
	return nil, usagef("need -n N (N > 0) and a command after --, or -c CMD")
}

func (o *attemptOptions) logDir(ro *runner.Options) error {
	d := filepath.Join(ro.Store, "attempts")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("create %s for the attempts' output: %w", d, err)
	}
	ro.LogDir = d
	return nil
}

func runRace(ctx context.Context, o *raceOptions) error {
	cmds, err := attemptCommands(o.N, o.Argv, o.Cmds)
	if err != nil {
		return err
	}
	ro, b, err := o.runnerOptions(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := o.logDir(&ro); err != nil {
		return err
	}
	spec := runner.RaceSpec{Parent: o.Parent, Cmds: cmds}
	if o.Check != "" {
		spec.Check = []string{"/bin/sh", "-c", o.Check}
	}
	recs, err := runner.Race(ctx, ro, spec)
	if err != nil {
		return err
	}
	if err := printRecords(o.stdout, o.JSON, recs); err != nil {
		return err
	}
	for _, r := range recs {
		if r.State == branches.StateCommitted {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("no attempt succeeded: nothing committed")
}

type bestOfOptions struct {
	attemptOptions
	N        int
	ScoreCmd string
	Keep     int
	NoCommit bool
	Parent   string
	Argv     []string
}

func newBestOfCommand(g *globalOptions) *cobra.Command {
	opts := &bestOfOptions{attemptOptions: attemptOptions{globalOptions: g}}
	cmd := &cobra.Command{
		Use:   "best-of PARENT -n N [flags] -- CMD [ARGS...]",
		Short: "Run N attempts in children of PARENT to their end; commit the best-scored",
		Long: `Fork N children of PARENT (PARENT-ID-I) and run CMD in each, as exec does,
to its end (--timeout kills). Each attempt gets a score: the last number
--score-cmd (sh -c, run in its branch) prints, else the last number the
attempt wrote to file descriptor 3, else 1 for exit 0 and 0 otherwise.
The best-scored attempt that exited 0 is flushed and committed, unless
--no-commit; the others are aborted. --keep K keeps the K best live instead
and commits none (a commit would invalidate them): commit the one you
choose with branchnfs commit.

It prints one record per attempt (a table, or --json: an array) and exits 0
when an attempt was committed or kept (or, with --no-commit, scored), 1
otherwise.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return usagef("best-of needs PARENT, -n N, then -- and the command")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Parent, opts.Argv = args[0], args[1:]
			return runBestOf(cmd.Context(), opts)
		},
	}
	opts.attemptOptions.AddFlags(cmd)
	cmd.Flags().IntVarP(&opts.N, "n", "n", 0, "number of attempts")
	cmd.Flags().StringVar(&opts.ScoreCmd, "score-cmd", "", "shell command run in each attempt's branch; prints its score")
	cmd.Flags().IntVar(&opts.Keep, "keep", 0, "keep the K best attempts live and commit none")
	cmd.Flags().BoolVar(&opts.NoCommit, "no-commit", false, "score every attempt, commit none, abort all")
	return cmd
}

func runBestOf(ctx context.Context, o *bestOfOptions) error {
	if o.N <= 0 {
		return usagef("best-of needs -n N with N > 0")
	}
	if o.Keep < 0 {
		return usagef("--keep must not be negative")
	}
	ro, b, err := o.runnerOptions(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := o.logDir(&ro); err != nil {
		return err
	}
	spec := runner.BestOfSpec{Parent: o.Parent, N: o.N, Argv: o.Argv, Keep: o.Keep, NoCommit: o.NoCommit}
	if o.ScoreCmd != "" {
		spec.ScoreCmd = []string{"/bin/sh", "-c", o.ScoreCmd}
	}
	recs, err := runner.BestOf(ctx, ro, spec)
	if err != nil {
		return err
	}
	if err := printRecords(o.stdout, o.JSON, recs); err != nil {
		return err
	}
	for _, r := range recs {
		if r.State == branches.StateCommitted || r.State == branches.StateLive || (o.NoCommit && r.Score != nil) {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("no attempt succeeded: nothing committed")
}

// printRecords prints records as a table or a JSON array.
func printRecords(w io.Writer, asJSON bool, recs []runner.Record) error {
	if asJSON {
		if recs == nil {
			recs = []runner.Record{}
		}
		return writeJSON(w, recs)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BRANCH\tEXIT\tSIGNAL\tSTATE\tDURATION\tKILLED_BY\tSCORE\tDIFF\tERROR")
	for _, r := range recs {
		score, diff := "-", "-"
		if r.Score != nil {
			score = fmt.Sprintf("%g", *r.Score)
		}
		if r.Diff != nil {
			diff = fmt.Sprintf("+%d ~%d -%d %s", r.Diff.Added, r.Diff.Modified, r.Diff.Deleted, humanBytes(r.Diff.Bytes))
		}
		killed := r.KilledBy
		if killed == "" {
			killed = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Branch, r.ExitCode, r.Signal, r.State,
			(time.Duration(r.DurationMS) * time.Millisecond).String(), killed, score, diff, strings.ReplaceAll(r.Error, "\n", " "))
	}
	return tw.Flush()
}

// SetMeta lets the runner label, score and lease the branches of its
// attempts (attemptBackend is defined in forced.go).
func (b attemptBackend) SetMeta(ctx context.Context, name string, u branches.MetaUpdate) (branches.Meta, error) {
	mb, ok := b.backend.Backend.(control.MetaBackend)
	if !ok {
		return branches.Meta{}, errors.New("this backend keeps no labels, scores or leases")
	}
	return mb.SetMeta(ctx, name, u)
}

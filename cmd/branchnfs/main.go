// Command branchnfs serves copy-on-write branches of a workspace over
// NFSv3 and manages them. See README.md for the commands and the API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/branchnfs/branchnfs/attempt"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

// Exit codes. They are part of the stable CLI contract (README.md).
const (
	exitOK          = 0
	exitError       = 1   // anything not listed below
	exitUsage       = 2   // bad flags or arguments
	exitNotFound    = 3   // no such branch or checkpoint
	exitExists      = 4   // branch, checkpoint or store already exists
	exitInvalidName = 5   // name outside [A-Za-z0-9._-]{1,64}
	exitInvalidated = 6   // branch invalidated, committed or aborted
	exitConflict    = 7   // commit refused: paths changed on both sides
	exitHasChildren = 8   // commit refused: live children
	exitReadOnly    = 9   // main cannot be committed or aborted
	exitNoSpace     = 10  // disk full, nothing changed
	exitNoStore     = 11  // no store at --store (run init or serve)
	exitStoreBusy   = 12  // another process holds the store
	exitMountFailed = 13  // mount or umount command failed
	exitInUse       = 14  // commit or abort refused: NFS clients use the branch
	exitNotOwner    = 15  // another server owns the branch (or none: takeover)
	exitInterrupted = 130 // SIGINT/SIGTERM
)

// exitApplyConflict: apply refused, the folder changed paths the branch
// changed too (README.md).
const exitApplyConflict = 16

func main() {
	// A helper supervising an attempt's process tree is this binary too.
	attempt.RunHelper()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, a second one kills the process the default
	// way, in case the clean shutdown hangs.
	go func() { <-ctx.Done(); stop() }()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := &globalOptions{stdout: stdout, stderr: stderr}
	root := newRootCommand(opts)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var es *exitStatusError
	if errors.As(err, &es) {
		return es.code // the status of the command an attempt ran
	}
	if err != nil {
		fmt.Fprintf(stderr, "branchnfs: %s\n", errorMessage(err))
	}
	return exitCode(err)
}

// exitCode maps an error to the process exit code. It is the only place
// that knows exit codes.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, errNoStore):
		return exitNoStore
	case errors.Is(err, errStoreBusy):
		return exitStoreBusy
	case errors.Is(err, errMountFailed):
		return exitMountFailed
	case errors.Is(err, branches.ErrInvalidName):
		return exitInvalidName
	case errors.Is(err, branches.ErrNotFound):
		return exitNotFound
	case errors.Is(err, branches.ErrExists), errors.Is(err, errStoreExists), errors.Is(err, errRefExists):
		return exitExists
	case errors.Is(err, branches.ErrConflict):
		return exitConflict
	case errors.Is(err, errApplyConflict):
		return exitApplyConflict
	case errors.Is(err, branches.ErrHasChildren):
		return exitHasChildren
	case errors.Is(err, branches.ErrInvalidated), errors.Is(err, branches.ErrStale):
		return exitInvalidated
	case errors.Is(err, branches.ErrNotOwner):
		return exitNotOwner
	case errors.Is(err, branches.ErrReadOnly):
		return exitReadOnly
	case errors.Is(err, branches.ErrNoSpace), errors.Is(err, syscall.ENOSPC):
		return exitNoSpace
	case errors.Is(err, control.ErrBadRequest):
		return exitUsage
	case errors.Is(err, control.ErrInUse):
		return exitInUse
	}
	return exitError
}

// errorMessage is what the user sees for err: the branches package prefix
// is dropped, the rest is kept as is.
func errorMessage(err error) string {
	var ue *usageError
	if errors.As(err, &ue) {
		return ue.Error() + " (see --help)"
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return trimPrefix(err.Error(), "branches: ")
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// usageError is a bad command line (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// exactArgs is cobra.ExactArgs with a usage error and the argument names.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s needs %d argument(s): %s (got %d)", cmd.Name(), len(names), joinNames(names), len(args))
		}
		return nil
	}
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += " "
		}
		s += n
	}
	return s
}

func newRootCommand(opts *globalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:   "branchnfs",
		Short: "Copy-on-write branches of a workspace, served over NFSv3",
		Long: `branchnfs serves copy-on-write branches of a workspace over NFSv3 on a
loopback port. Fork a branch in microseconds, mount it, work in it, then
commit it into its parent or abort it.

Branch commands talk to the running server through its control socket, or
open the store directly when no server runs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{msg: err.Error()}
	})
	opts.AddFlags(root)
	addVersionFlag(root)
	root.AddCommand(
		newInitCommand(opts),
		newImportCommand(opts),
		newServeCommand(opts),
		newForkCommand(opts),
		newCommitCommand(opts),
		newAbortCommand(opts),
		newCheckpointCommand(opts),
		newRestoreCommand(opts),
		newListCommand(opts),
		newDiffCommand(opts),
		newExportCommand(opts),
		newApplyCommand(opts),
		newGCCommand(opts),
		newTakeoverCommand(opts),
		newStatusCommand(opts),
		newMountCommand(opts),
		newUmountCommand(opts),
		newExecCommand(opts),
		newRaceCommand(opts),
		newBestOfCommand(opts),
		newMCPCommand(opts),
		newVersionCommand(opts),
		newServiceCommand(opts),
		newDoctorCommand(opts),
		newS3Command(opts),
	)
	return root
}

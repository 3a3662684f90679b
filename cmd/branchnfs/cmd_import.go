package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/cowfs/importdir"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

type importOptions struct {
	*globalOptions
	Update bool
	From   string
	Force  bool
	JSON   bool
}

func newImportCommand(g *globalOptions) *cobra.Command {
	opts := &importOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "import --update [--from DIR] [--force]",
		Short: "Bring the changes of the folder main was imported from into main",
		Long: `Bring what changed in the folder main was imported from (init or serve
--from; --from DIR names another, which is then recorded) into main, as
one atomic commit. Like git's index, it compares each entry's size,
mtime, ctime and inode with what it recorded last time and reads only
entries whose stat moved; of those, only what differs is written.

It is a three-way update: a path the folder did not change keeps what main
has (changes committed into main stay); a path the folder changed takes
the folder's version; a path the folder deleted is deleted in main; a path
only main has is kept.

Live children of main (agents at work) make it refuse unless --force:
with --force they stay live and keep seeing main as at their fork, and
their later commits merge with the update (a path both changed is a
conflict). With a server running, the server runs the update (the
folder is then read by the server's user).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImport(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Update, "update", false, "bring the folder's changes since the last import into main (required)")
	cmd.Flags().StringVar(&opts.From, "from", "", "the folder to read (default: the one main was imported from); recorded for next time")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "update main even while it has live children (they keep their snapshot)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	return cmd
}

// importResult is the --json output of import --update.
type importResult struct {
	Branch string `json:"branch"`
	Source string `json:"source"`
	importdir.Changes
	// Children are main's live children the update left live (--force).
	Children []string `json:"children,omitempty"`
	TookMS   int64    `json:"took_ms"`
}

// updatePrefix starts the names of the temporary branches of updates.
const updatePrefix = importPrefix + "update-"

func runImport(ctx context.Context, o *importOptions) error {
	if !o.Update {
		return usagef("import needs --update: the first import of a folder is `branchnfs init --from DIR` (or serve --from)")
	}
	dir, err := o.storeDir()
	if err != nil {
		return err
	}
	if c, _, err := control.Dial(ctx, control.SocketPath(dir), dialTimeout); err == nil {
		// The server runs the update: it holds the store.
		defer c.Close()
		req := control.ImportUpdateRequest{Force: o.Force}
		if o.From != "" {
			if req.From, err = filepath.Abs(o.From); err != nil {
				return err
			}
		}
		var res importResult
		if err := c.ImportUpdate(ctx, req, &res); err != nil {
			// The API carries the children, not the advice.
			if hc, ok := errors.AsType[*branches.HasChildrenError](err); ok && hc.Branch == "main" {
				return childrenRefusal(hc.Children)
			}
			return err
		}
		return o.printImport(res)
	}
	s, err := openStore(ctx, dir, openOptions{})
	if err != nil {
		return err
	}
	res, err := updateMain(ctx, s, o)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close store: %w", cerr)
	}
	if err != nil {
		return err
	}
	return o.printImport(res)
}

// serverImportUpdate runs import --update in serve, for the control API
// (POST /v1/import/update): one update at a time, its summary logged;
// sourceDir, the status's source folder, follows a new --from.
func serverImportUpdate(s *openedStore, sourceDir *atomic.Pointer[string], logger *slog.Logger) control.ImportUpdater {
	var mu sync.Mutex // one update at a time
	return func(ctx context.Context, req control.ImportUpdateRequest) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		o := &importOptions{globalOptions: &globalOptions{stdout: io.Discard, stderr: io.Discard}, Update: true, From: req.From, Force: req.Force}
		res, err := updateMain(ctx, s, o)
		if err != nil {
			if ue, ok := errors.AsType[*usageError](err); ok {
				err = fmt.Errorf("%w: %s", control.ErrBadRequest, ue.msg)
			}
			return nil, err
		}
		if req.From != "" {
			src := res.Source
			sourceDir.Store(&src)
		}
		logger.Info("import --update", "source", res.Source, "added", res.Added, "modified", res.Modified, "deleted", res.Deleted,
			"unchanged", res.Unchanged, "read", res.Hashed, "took_ms", res.TookMS)
		return res, nil
	}
}

// childrenRefusal is the refusal of an update while main has the live
// children kids.
func childrenRefusal(kids []string) error {
	return fmt.Errorf("%w; their agents would not see the update, and their commits would merge with it: pass --force to update main anyway (they keep their snapshot), or commit or abort them first",
		&branches.HasChildrenError{Branch: "main", Children: kids})
}

// printImport prints an update's summary.
func (o *importOptions) printImport(res importResult) error {
	if o.JSON {
		return writeJSON(o.stdout, res)
	}
	const maxLines = 200
	for i, p := range res.Paths {
		if i == maxLines {
			fmt.Fprintf(o.stdout, "... and %d more (--json lists them all)\n", len(res.Paths)-maxLines)
			break
		}
		fmt.Fprintf(o.stdout, "%c %s\n", strings.ToUpper(p.Kind[:1])[0], quoteName(p.Path))
	}
	fmt.Fprintf(o.stdout, "updated main from %s: %d added, %d modified, %d deleted (%d unchanged, %d read) in %s\n",
		res.Source, res.Added, res.Modified, res.Deleted, res.Unchanged, res.Hashed, (time.Duration(res.TookMS) * time.Millisecond).String())
	if len(res.Children) > 0 {
		fmt.Fprintf(o.stdout, "live children of main kept their snapshot: %s\n", strings.Join(res.Children, ", "))
	}
	return nil
}

// quoteName shows a path on one line: names with control characters are
// quoted Go-style.
func quoteName(p string) string {
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}

// updateMain runs the update: into a temporary fork of main, committed
// into main (without invalidating main's other children) when complete,
// aborted otherwise.
func updateMain(ctx context.Context, s *openedStore, o *importOptions) (importResult, error) {
	start := time.Now()
	mgr := s.mgr
	res := importResult{Branch: "main"}
	src := o.From
	if src == "" {
		var err error
		if src, err = mgr.SourceDir(ctx); err != nil {
			return res, err
		}
		if src == "" {
			return res, usagef("main of %s has no recorded source folder (it was not imported with --from, or by an older version): pass --from DIR", s.dir)
		}
	} else {
		abs, err := filepath.Abs(src)
		if err != nil {
			return res, err
		}
		src = abs
	}
	res.Source = src
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return res, fmt.Errorf("import --update: source folder %s: %w (pass --from DIR if it moved)", src, err)
	}
	// A crash during an earlier update leaves its temporary branch.
	infos, err := mgr.List(ctx)
	if err != nil {
		return res, err
	}
	var kids []string
	for _, in := range infos {
		if in.State != branches.StateLive {
			continue
		}
		if strings.HasPrefix(in.Name, updatePrefix) {
			if _, err := mgr.Abort(ctx, in.Name); err != nil {
				return res, fmt.Errorf("drop the interrupted update %s: %w", in.Name, err)
			}
			continue
		}
		if in.Parent == "main" && !strings.HasPrefix(in.Name, importPrefix) {
			kids = append(kids, in.Name)
		}
	}
	if len(kids) > 0 && !o.Force {
		return res, childrenRefusal(kids)
	}
	res.Children = kids
	cache, err := importdir.LoadCache(ctx, s.kv)
	if err != nil {
		return res, err
	}
	tmp := fmt.Sprintf("%s%d", updatePrefix, time.Now().UnixNano())
	if _, err := mgr.Fork(ctx, "main", tmp); err != nil {
		return res, fmt.Errorf("import --update: %w", err)
	}
	fail := func(err error) (importResult, error) {
		if _, aerr := mgr.Abort(context.WithoutCancel(ctx), tmp); aerr != nil {
			return res, fmt.Errorf("import --update from %s: %w (and dropping the partial update %s failed: %v)", src, err, tmp, aerr)
		}
		return res, fmt.Errorf("import --update from %s: %w (main is unchanged)", src, err)
	}
	fs, _, err := mgr.View(tmp)
	if err != nil {
		return fail(err)
	}
	ip := newImportProgress(o.stderr)
	ip.line = updateLine
	ch, err := importdir.Update(ctx, fs, cowfs.RootIno, src, cache, importdir.Options{Progress: ip.update})
	if err != nil {
		return fail(err)
	}
	res.Changes = ch
	if _, err := mgr.CommitWith(ctx, tmp, branches.CommitOptions{KeepSiblings: true}); err != nil {
		return fail(err)
	}
	// Committed: the cache and the source follow. Should either fail, the
	// next update reads more than it needs to, and writes nothing twice.
	if err := cache.Save(ctx, s.kv); err != nil {
		return res, fmt.Errorf("import --update: main is updated, but %w (the next update reads more)", err)
	}
	if o.From != "" {
		if err := mgr.SetSourceDir(ctx, src); err != nil {
			return res, err
		}
	}
	if err := mgr.Sync(ctx); err != nil {
		return res, fmt.Errorf("import --update: sync the store: %w", err)
	}
	res.TookMS = time.Since(start).Milliseconds()
	ip.finish()
	return res, nil
}

func updateLine(p importdir.Progress) string {
	return fmt.Sprintf("compared %d entries with the last import, read %d, wrote %s", p.Scanned, p.Hashed, humanBytes(p.Bytes))
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/cowfs/importdir"
	"github.com/spf13/cobra"
)

type initOptions struct {
	*globalOptions
	From string
}

func newInitCommand(g *globalOptions) *cobra.Command {
	opts := &initOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the store and branch main, empty or imported from a directory",
		Long: `Create the store and its root branch main. With --from DIR, main holds a
copy of DIR (contents, modes, owners, symlinks, hard links, times); the
import is all or nothing.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInit(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func (o *initOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.From, "from", "", "import this directory tree into main")
}

func runInit(ctx context.Context, o *initOptions) error {
	dir, err := o.storeDir()
	if err != nil {
		return err
	}
	if storeExists(dir) {
		return fmt.Errorf("%w at %s", errStoreExists, dir)
	}
	_, statErr := os.Stat(dir)
	dirExisted := statErr == nil
	s, err := openStore(ctx, dir, openOptions{create: true})
	if err != nil {
		return err
	}
	if o.From != "" {
		if err := importIntoMain(ctx, s.mgr, o.From, o.stderr); err != nil {
			s.Close()
			removeNewStore(dir, dirExisted)
			return err
		}
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	fmt.Fprintf(o.stdout, "created store %s with branch main\n", dir)
	return nil
}

// removeNewStore removes a store this process has just created and failed
// to fill, so that the same command can simply be run again.
func removeNewStore(dir string, dirExisted bool) {
	if !dirExisted {
		os.RemoveAll(dir)
		return
	}
	for _, n := range []string{dbDirName, lockFileName} {
		os.RemoveAll(filepath.Join(dir, n))
	}
}

// importIntoMain imports the tree at src into branch main, all or nothing:
// it imports into a temporary fork of main and commits it.
func importIntoMain(ctx context.Context, mgr *branches.Manager, src string, progress io.Writer) error {
	tmp := fmt.Sprintf(".import-%d", time.Now().UnixNano())
	if _, err := mgr.Fork(ctx, "main", tmp); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	fs, _, err := mgr.View(tmp)
	if err == nil {
		start := time.Now()
		ip := newImportProgress(progress)
		var p importdir.Progress
		p, err = importdir.Import(ctx, fs, cowfs.RootIno, src, importdir.Options{Progress: ip.update})
		if err == nil {
			_, err = mgr.Commit(ctx, tmp)
		}
		if err == nil {
			ip.done(p, time.Since(start))
			return nil
		}
	}
	if _, aerr := mgr.Abort(context.WithoutCancel(ctx), tmp); aerr != nil {
		return fmt.Errorf("import of %s: %w (and dropping the partial import %s failed: %v)", src, err, tmp, aerr)
	}
	return fmt.Errorf("import of %s: %w (nothing was imported)", src, err)
}

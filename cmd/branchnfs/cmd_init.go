package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/cowfs/importdir"
	"github.com/spf13/cobra"
)

type initOptions struct {
	*globalOptions
	From   string
	Ignore []string
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
	addIgnoreFlag(cmd, &o.Ignore)
}

func runInit(ctx context.Context, o *initOptions) error {
	ignore, err := ignoreList(o.Ignore)
	if err != nil {
		return err
	}
	dir, err := o.storeDir()
	if err != nil {
		return err
	}
	fresh := !storeExists(dir)
	if !fresh && !importPending(dir) {
		return fmt.Errorf("%w at %s", errStoreExists, dir)
	}
	_, statErr := os.Stat(dir)
	dirExisted := statErr == nil
	s, err := openStore(ctx, dir, openOptions{create: true, ignore: ignore})
	if err != nil {
		return err
	}
	if redo, err := recoverImport(ctx, s, o.stderr); err != nil {
		s.Close()
		return err
	} else if !redo && !fresh {
		// The interrupted import had in fact completed.
		if err := s.Close(); err != nil {
			return err
		}
		return fmt.Errorf("%w at %s", errStoreExists, dir)
	}
	if o.From != "" {
		if err := importIntoMain(ctx, s, o.From, o.stderr); err != nil {
			s.Close()
			if fresh {
				removeNewStore(dir, dirExisted)
			}
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

// importPendingName is STORE/import.pending: it exists while an initial
// import runs, so that one interrupted by a crash is noticed and redone.
const importPendingName = "import.pending"

// importPrefix starts the names of the temporary import branches.
const importPrefix = ".import-"

func importPending(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, importPendingName))
	return err == nil
}

// recoverImport cleans up after an initial import that a crash interrupted:
// it aborts the leftover temporary branch. It reports whether main is
// still without the import (so --from should run again).
func recoverImport(ctx context.Context, s *openedStore, w io.Writer) (redo bool, err error) {
	if !importPending(s.dir) {
		return false, nil
	}
	infos, err := s.mgr.List(ctx)
	if err != nil {
		return false, err
	}
	redo = true
	found := false
	for _, in := range infos {
		if strings.HasPrefix(in.Name, importPrefix) && in.State == branches.StateLive {
			found = true
			if _, err := s.mgr.Abort(ctx, in.Name); err != nil {
				return false, fmt.Errorf("drop the interrupted import %s: %w", in.Name, err)
			}
		}
	}
	if !found {
		// Either the import never forked, or its commit went through and
		// only the marker was left: main tells which.
		fs, _, err := s.mgr.View("main")
		if err != nil {
			return false, err
		}
		ents, _, err := fs.ReadDir(cowfs.RootIno, 0, 1)
		if err != nil {
			return false, err
		}
		redo = len(ents) == 0
	}
	if redo {
		fmt.Fprintf(w, "branchnfs: the initial import into %s was interrupted; nothing of it was kept\n", s.dir)
	}
	if err := os.Remove(filepath.Join(s.dir, importPendingName)); err != nil && !os.IsNotExist(err) {
		return false, err
	}
	return redo, nil
}

// importIntoMain imports the tree at src into branch main, all or nothing:
// it imports into a temporary fork of main and commits it.
func importIntoMain(ctx context.Context, s *openedStore, src string, progress io.Writer) error {
	mgr := s.mgr
	marker := filepath.Join(s.dir, importPendingName)
	if err := os.WriteFile(marker, []byte(src+"\n"), 0o600); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer os.Remove(marker)
	tmp := fmt.Sprintf("%s%d", importPrefix, time.Now().UnixNano())
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

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
	From    string
	Ignore  []string
	Backend backendFlags
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
	o.Backend.AddFlags(cmd)
}

func runInit(ctx context.Context, o *initOptions) error {
	ignore, err := ignoreList(o.Ignore)
	if err != nil {
		return err
	}
	backend, err := o.Backend.config()
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
	s, err := openStore(ctx, dir, openOptions{create: true, ignore: ignore, backend: backend})
	if err != nil {
		return err
	}
	if redo, err := recoverImport(ctx, s, o.stderr); err != nil {
		s.Close()
		return err
	} else if !fresh && (!redo || o.From == "") {
		// The interrupted import had in fact completed, or there is nothing
		// to redo it with (recoverImport said how).
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
	for _, n := range []string{dbDirName, lockFileName, importPendingName} {
		os.RemoveAll(filepath.Join(dir, n))
	}
}

// importPendingName is STORE/import.pending: it holds the source directory
// of an initial import and exists until that import has completed (its
// commit synced), so that an import interrupted by a crash or a failure is
// noticed, reported and redone by the next --from.
const importPendingName = "import.pending"

// importPrefix starts the names of the temporary import branches.
const importPrefix = ".import-"

func importPending(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, importPendingName))
	return err == nil
}

// pendingImportSource returns the source directory recorded in the marker.
func pendingImportSource(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, importPendingName))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// writeImportMarker durably records that an import of src has started.
func writeImportMarker(dir, src string) error {
	f, err := os.OpenFile(filepath.Join(dir, importPendingName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(src + "\n")
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
}

// removeImportMarker durably records that no import is pending.
func removeImportMarker(dir string) error {
	if err := os.Remove(filepath.Join(dir, importPendingName)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// recoverImport cleans up after an initial import that a crash interrupted:
// it aborts the leftover temporary branch. It reports whether main is
// still without the import (so --from should run again); then the marker
// stays, so that a later --from still redoes the import, and the user is
// told how. If main has content, the import completed (or main was written
// since) and the marker goes.
func recoverImport(ctx context.Context, s *openedStore, w io.Writer) (redo bool, err error) {
	if !importPending(s.dir) {
		return false, nil
	}
	src := pendingImportSource(s.dir)
	infos, err := s.mgr.List(ctx)
	if err != nil {
		return false, err
	}
	for _, in := range infos {
		if strings.HasPrefix(in.Name, importPrefix) && in.State == branches.StateLive {
			if _, err := s.mgr.Abort(ctx, in.Name); err != nil {
				return false, fmt.Errorf("drop the interrupted import %s: %w", in.Name, err)
			}
		}
	}
	// Either the import never committed, or its commit went through and
	// only the marker was left: main tells which.
	fs, _, err := s.mgr.View("main")
	if err != nil {
		return false, err
	}
	ents, _, err := fs.ReadDir(cowfs.RootIno, 0, 1)
	if err != nil {
		return false, err
	}
	if len(ents) == 0 {
		fmt.Fprintf(w, "branchnfs: the initial import of %s into %s was interrupted; nothing of it was kept, and main is empty; run `branchnfs serve --from %s` or `branchnfs init --from %s` with --store %s to import it again\n",
			orUnknown(src), s.dir, orUnknown(src), orUnknown(src), s.dir)
		return true, nil
	}
	if err := removeImportMarker(s.dir); err != nil {
		return false, fmt.Errorf("remove the import marker: %w", err)
	}
	return false, nil
}

func orUnknown(src string) string {
	if src == "" {
		return "DIR"
	}
	return src
}

// importIntoMain imports the tree at src into branch main, all or nothing:
// it imports into a temporary fork of main and commits it.
func importIntoMain(ctx context.Context, s *openedStore, src string, progress io.Writer) error {
	mgr := s.mgr
	if err := writeImportMarker(s.dir, src); err != nil {
		return fmt.Errorf("import: record the pending import in %s: %w", s.dir, err)
	}
	tmp := fmt.Sprintf("%s%d", importPrefix, time.Now().UnixNano())
	if _, err := mgr.Fork(ctx, "main", tmp); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	fs, _, err := mgr.View(tmp)
	if err == nil {
		start := time.Now()
		ip := newImportProgress(progress)
		var p importdir.Progress
		cache := importdir.NewCache()
		p, err = importdir.Import(ctx, fs, cowfs.RootIno, src, importdir.Options{Progress: ip.update, Cache: cache})
		if err == nil {
			_, err = mgr.Commit(ctx, tmp)
		}
		if err == nil {
			// What import --update starts from: the folder and its stats.
			if err := cache.Save(ctx, s.kv); err != nil {
				return fmt.Errorf("import of %s: %w", src, err)
			}
			abs, err := filepath.Abs(src)
			if err == nil {
				err = mgr.SetSourceDir(ctx, abs)
			}
			if err != nil {
				return fmt.Errorf("import of %s: %w", src, err)
			}
			// The marker goes only once the import is durable.
			if err := mgr.Sync(ctx); err != nil {
				return fmt.Errorf("import of %s: sync the store: %w", src, err)
			}
			if err := removeImportMarker(s.dir); err != nil {
				return fmt.Errorf("import of %s: remove the import marker: %w", src, err)
			}
			ip.done(p, time.Since(start))
			return nil
		}
	}
	if _, aerr := mgr.Abort(context.WithoutCancel(ctx), tmp); aerr != nil {
		return fmt.Errorf("import of %s: %w (and dropping the partial import %s failed: %v)", src, err, tmp, aerr)
	}
	return fmt.Errorf("import of %s: %w (nothing was imported)", src, err)
}

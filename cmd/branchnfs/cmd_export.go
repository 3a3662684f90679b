package main

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/branchnfs/branchnfs/branches/results"
	"github.com/spf13/cobra"
)

type exportOptions struct {
	*globalOptions
	JSON       bool
	Checkpoint string
	Tar        string
	Name       string
	Dir        string
}

func newExportCommand(g *globalOptions) *cobra.Command {
	opts := &exportOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "export NAME DIR | export NAME --tar FILE",
		Short: "Copy branch NAME (or a checkpoint of it) out of the store, into a new folder or a tar stream",
		Long: `Write branch NAME as it is now, or its checkpoint LABEL with --checkpoint
LABEL (a frozen state), into DIR, which must be missing or empty: every
directory (empty ones too), file and symlink, with its mode and mtime.
With --tar FILE (- for stdout) write a tar stream instead. FIFOs,
sockets and devices are left out and counted. .git is included: the
folder is a working checkout.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if opts.Tar != "" {
				return exactArgs("NAME")(cmd, args)
			}
			return exactArgs("NAME", "DIR")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if len(args) > 1 {
				opts.Dir = args[1]
			}
			return runExport(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was exported as JSON (not with --tar -)")
	cmd.Flags().StringVar(&opts.Checkpoint, "checkpoint", "", "export this checkpoint of NAME instead of the branch")
	cmd.Flags().StringVar(&opts.Tar, "tar", "", "write a tar stream to FILE (- for stdout) instead of a folder")
	return cmd
}

// exportResult is export's --json output.
type exportResult struct {
	Branch     string `json:"branch"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Dir        string `json:"dir,omitempty"`
	Tar        string `json:"tar,omitempty"`
	results.TarStats
}

func runExport(ctx context.Context, o *exportOptions) error {
	if o.Tar == "-" && o.JSON {
		return usagef("--json and --tar - both write to stdout: give --tar a file")
	}
	if o.Tar != "" {
		return withBackend(ctx, o.globalOptions, func(b *backend) error {
			out, err := outputsOf(b)
			if err != nil {
				return err
			}
			var w io.Writer = o.stdout
			var f *os.File
			if o.Tar != "-" {
				if f, err = os.OpenFile(o.Tar, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
					return fmt.Errorf("export: %w (the tar file must not exist yet)", err)
				}
				w = f
			}
			bw := bufio.NewWriterSize(w, 1<<20)
			var st results.TarStats
			st, err = out.Export(ctx, o.Name, o.Checkpoint, "", bw)
			if err == nil {
				err = bw.Flush()
			}
			if f != nil {
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					os.Remove(o.Tar)
				}
			}
			if err != nil || o.Tar == "-" {
				return err
			}
			if st == (results.TarStats{}) {
				// Through the API the counts stay on the server: read
				// them back from the file.
				if st, err = countTar(o.Tar); err != nil {
					return err
				}
			}
			return o.printExport(exportResult{Branch: o.Name, Checkpoint: o.Checkpoint, Tar: o.Tar, TarStats: st})
		})
	}
	root, created, err := openEmptyDir(o.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	err = withBackend(ctx, o.globalOptions, func(b *backend) error {
		out, err := outputsOf(b)
		if err != nil {
			return err
		}
		st, err := exportInto(ctx, out, o.Name, o.Checkpoint, "", root)
		if err != nil {
			return err
		}
		return o.printExport(exportResult{Branch: o.Name, Checkpoint: o.Checkpoint, Dir: o.Dir, TarStats: st})
	})
	if err != nil {
		// Leave no half export behind.
		root.Close()
		if created {
			os.RemoveAll(o.Dir)
		} else {
			emptyDir(o.Dir)
		}
	}
	return err
}

func (o *exportOptions) printExport(r exportResult) error {
	if o.JSON {
		return writeJSON(o.stdout, r)
	}
	what := r.Branch
	if r.Checkpoint != "" {
		what += "@" + r.Checkpoint
	}
	to := r.Dir
	if to == "" {
		to = r.Tar
	}
	fmt.Fprintf(o.stdout, "exported %s to %s: %d files, %d dirs, %d symlinks, %s", what, to, r.Files, r.Dirs, r.Symlinks, humanBytes(r.Bytes))
	if r.Skipped > 0 {
		fmt.Fprintf(o.stdout, " (%d FIFOs, sockets or devices left out)", r.Skipped)
	}
	fmt.Fprintln(o.stdout)
	return nil
}

// exportInto extracts branch name (or its checkpoint label; only the
// subtree sub if set) into root, streaming.
func exportInto(ctx context.Context, out interface {
	Export(ctx context.Context, name, label, sub string, w io.Writer) (results.TarStats, error)
}, name, label, sub string, root *os.Root) (results.TarStats, error) {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		_, err := out.Export(ctx, name, label, sub, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	st, xerr := results.Extract(pr, root)
	pr.CloseWithError(errExtractStopped)
	err := <-errc
	if xerr != nil {
		// A failed export explains the stream it cut.
		if err != nil && !errors.Is(err, errExtractStopped) {
			return st, err
		}
		return st, xerr
	}
	return st, err
}

var errExtractStopped = errors.New("the extraction stopped")

// openEmptyDir opens dir, creating it if missing (created says so); an
// existing dir must be empty.
func openEmptyDir(dir string) (root *os.Root, created bool, err error) {
	switch err := os.Mkdir(dir, 0o755); {
	case err == nil:
		created = true
	case errors.Is(err, fs.ErrExist):
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, false, err
		}
		if !fi.IsDir() {
			return nil, false, usagef("%s exists and is not a directory: give a new or empty folder", dir)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, false, err
		}
		if len(ents) > 0 {
			return nil, false, usagef("%s is not empty (it holds %s): give a new or empty folder", dir, results.QuotePath(ents[0].Name()))
		}
	default:
		return nil, false, fmt.Errorf("export: %w", err)
	}
	root, err = os.OpenRoot(dir)
	return root, created, err
}

// emptyDir removes what dir holds.
func emptyDir(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(dir + "/" + e.Name())
	}
}

// countTar counts the entries of the tar file name.
func countTar(name string) (results.TarStats, error) {
	var st results.TarStats
	f, err := os.Open(name)
	if err != nil {
		return st, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("export: reading back %s: %w", name, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			st.Dirs++
		case tar.TypeReg:
			st.Files++
			st.Bytes += h.Size
		case tar.TypeSymlink:
			st.Symlinks++
		}
	}
}

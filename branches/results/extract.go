package results

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Extract writes the tar stream r (from WriteTar) into the directory of
// root: directories (empty ones too), files and symlinks, with their
// modes and mtimes. root confines every write to the directory, whatever
// the stream's names and symlinks say. Other entry types are refused.
func Extract(r io.Reader, root *os.Root) (TarStats, error) {
	tr := tar.NewReader(r)
	var st TarStats
	type dirTime struct {
		name string
		mode fs.FileMode
		t    time.Time
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, fmt.Errorf("results: reading the tar stream: %w", err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if clean := path.Clean(name); clean != name || name == "" || path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") {
			return st, fmt.Errorf("results: tar entry %s: not a clean relative path", QuotePath(hdr.Name))
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		if hdr.Mode&0o4000 != 0 {
			mode |= fs.ModeSetuid
		}
		if hdr.Mode&0o2000 != 0 {
			mode |= fs.ModeSetgid
		}
		if hdr.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return st, err
			}
			dirs = append(dirs, dirTime{name, mode, hdr.ModTime})
			st.Dirs++
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return st, err
			}
			n, err := io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return st, err
			}
			if err := root.Chmod(name, mode); err != nil {
				return st, err
			}
			if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
				return st, err
			}
			st.Files++
			st.Bytes += n
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return st, err
			}
			st.Symlinks++
		default:
			return st, fmt.Errorf("results: tar entry %s: type %q: %w", QuotePath(hdr.Name), hdr.Typeflag, ErrUnsupported)
		}
	}
	// Directories last, deepest first: writing in them moved their
	// mtimes, and a read-only one must stay writable until its children
	// are in.
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].name > dirs[j].name })
	for _, d := range dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return st, err
		}
		if err := root.Chtimes(d.name, d.t, d.t); err != nil {
			return st, err
		}
	}
	return st, nil
}

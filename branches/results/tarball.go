package results

import (
	"archive/tar"
	"io"
	"io/fs"
	"path"
	"strings"
)

// TarOptions tune WriteTar.
type TarOptions struct {
	// Sub, when set, writes only that subtree (its paths keep their
	// prefix), e.g. ".git".
	Sub string
	// Ignore, when set, reports the paths ('/'-separated, from the
	// tree's root) left out.
	Ignore func(p string) bool
}

// TarStats counts what a tar stream holds.
type TarStats struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Skipped  int   `json:"skipped"` // FIFOs, sockets and devices
	Bytes    int64 `json:"bytes"`
}

// WriteTar writes tree t to w as a tar stream (PAX): every directory
// (empty ones too), file and symlink, with its mode (setuid, setgid and
// sticky bits included) and mtime, paths relative to the root, parents
// before children. FIFOs, sockets and devices are skipped and counted.
func WriteTar(w io.Writer, t Tree, o TarOptions) (TarStats, error) {
	tw := tar.NewWriter(w)
	var st TarStats
	var walk func(p string) error
	walk = func(p string) error {
		fi, err := t.Lstat(p)
		if err != nil {
			return err
		}
		e, err := entryOf(t, p, fi)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: p, Mode: int64(e.Mode.Perm()), ModTime: e.Mtime, Format: tar.FormatPAX}
		if e.Mode&fs.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if e.Mode&fs.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		if e.Mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		switch e.Type {
		case TypeDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
			st.Dirs++
		case TypeFile:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
			st.Files++
			st.Bytes += e.Size
		case TypeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
			st.Symlinks++
		default:
			st.Skipped++
			return nil
		}
		if p != "" && p != "." {
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		if e.Type == TypeFile {
			return copyFile(tw, t, p, e.Size)
		}
		if e.Type != TypeDir {
			return nil
		}
		infos, err := t.ReadDir(p)
		if err != nil {
			return err
		}
		for _, fi := range infos {
			if o.Ignore != nil && o.Ignore(path.Join(p, fi.Name())) {
				continue
			}
			if err := walk(path.Join(p, fi.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	root := strings.TrimPrefix(path.Clean("/"+o.Sub), "/")
	if root == "" {
		st.Dirs-- // the root is not an entry
	}
	if err := walk(root); err != nil {
		return st, err
	}
	return st, tw.Close()
}

package results

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5"
)

// Tree is the read side of a filesystem: what every form here reads,
// with slash-separated paths relative to its root ("" or "." is the
// root). FromBilly makes one of a billy.Filesystem (cowfs.View.Billy),
// Dir one of a directory.
type Tree interface {
	Lstat(p string) (os.FileInfo, error)
	Readlink(p string) (string, error)
	Open(p string) (io.ReadCloser, error)
	ReadDir(p string) ([]os.FileInfo, error) // sorted by name
}

// FromBilly returns fs as a Tree.
func FromBilly(fs billy.Filesystem) Tree { return billyTree{fs} }

type billyTree struct{ fs billy.Filesystem }

func (b billyTree) Lstat(p string) (os.FileInfo, error)     { return b.fs.Lstat(p) }
func (b billyTree) Readlink(p string) (string, error)       { return b.fs.Readlink(p) }
func (b billyTree) Open(p string) (io.ReadCloser, error)    { return b.fs.Open(p) }
func (b billyTree) ReadDir(p string) ([]os.FileInfo, error) { return b.fs.ReadDir(p) }

// Dir returns the directory root as a Tree. It follows no symlink below
// root.
func Dir(root string) Tree { return dirTree(root) }

type dirTree string

func (d dirTree) path(p string) string                { return filepath.Join(string(d), filepath.FromSlash(p)) }
func (d dirTree) Lstat(p string) (os.FileInfo, error) { return os.Lstat(d.path(p)) }
func (d dirTree) Readlink(p string) (string, error)   { return os.Readlink(d.path(p)) }
func (d dirTree) Open(p string) (io.ReadCloser, error) {
	// O_NOFOLLOW: a symlink swapped in for a file is not followed.
	return os.OpenFile(d.path(p), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}
func (d dirTree) ReadDir(p string) ([]os.FileInfo, error) {
	ents, err := os.ReadDir(d.path(p))
	if err != nil {
		return nil, err
	}
	out := make([]os.FileInfo, 0, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	return out, nil
}

// Type is the kind of a tree entry.
type Type string

const (
	TypeFile    Type = "file"
	TypeDir     Type = "dir"
	TypeSymlink Type = "symlink"
	TypeOther   Type = "other" // FIFO, socket or device: no form carries its content
)

// Entry is one path's state in a tree.
type Entry struct {
	Type   Type        `json:"type"`
	Mode   fs.FileMode `json:"mode"` // permission, setuid, setgid and sticky bits
	Size   int64       `json:"size,omitempty"`
	Mtime  time.Time   `json:"mtime"`
	Target string      `json:"target,omitempty"` // of a symlink
	// SHA256 is the hex SHA-256 of a file's content, when it was read.
	SHA256 string `json:"sha256,omitempty"`
}

// Delta is one path that differs between the base and the head: Old is
// its state in the base, New in the head, nil where the path is absent.
type Delta struct {
	Path string `json:"path"`
	Old  *Entry `json:"old,omitempty"`
	New  *Entry `json:"new,omitempty"`
}

// Kind is "added", "deleted" or "modified".
func (d Delta) Kind() string {
	switch {
	case d.Old == nil:
		return "added"
	case d.New == nil:
		return "deleted"
	}
	return "modified"
}

// entryOf describes fi; target is read for a symlink.
func entryOf(t Tree, p string, fi os.FileInfo) (*Entry, error) {
	e := &Entry{Mode: fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), Mtime: fi.ModTime()}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type, e.Size = TypeFile, fi.Size()
	case m.IsDir():
		e.Type = TypeDir
	case m&fs.ModeSymlink != 0:
		e.Type = TypeSymlink
		target, err := t.Readlink(p)
		if err != nil {
			return nil, err
		}
		e.Target = target
	default:
		e.Type = TypeOther
	}
	return e, nil
}

// Stat returns the entry of p in t, nil if there is none.
func Stat(t Tree, p string) (*Entry, error) {
	fi, err := t.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil // a parent is missing or not a directory
	}
	if err != nil {
		return nil, err
	}
	return entryOf(t, p, fi)
}

// HashFile returns the hex SHA-256 of the content of file p of t.
func HashFile(t Tree, p string) (string, error) {
	f, err := t.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// InGit reports whether p is the repository directory .git at the top of
// the tree, or under it.
func InGit(p string) bool { return p == ".git" || strings.HasPrefix(p, ".git/") }

// ExpandOptions tune Expand.
type ExpandOptions struct {
	// Ignore, when set, reports the paths ('/'-separated, from the
	// tree's root) left out of the subtrees
	// Expand walks, as the diff left them out of its paths.
	Ignore func(p string) bool
	// Hash reads both sides of every file whose size and mtime agree,
	// to tell a change of content from none, and records SHA256 of
	// every file on both sides.
	Hash bool
}

// Expand turns the paths a diff reported changed between base and head
// into the deltas of every path that differs, sorted by path (a parent
// before its children). A directory stands for its whole subtree (a
// renamed directory is one change in the diff), so its descendants on
// both sides are compared too. Paths that turn out the same on both
// sides are left out.
func Expand(base, head Tree, paths []string, o ExpandOptions) ([]Delta, error) {
	seen := map[string]bool{}
	var out []Delta
	var visit func(p string) error
	visit = func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		oldE, err := Stat(base, p)
		if err != nil {
			return err
		}
		newE, err := Stat(head, p)
		if err != nil {
			return err
		}
		if oldE == nil && newE == nil {
			return nil
		}
		if o.Hash {
			for _, side := range []struct {
				t Tree
				e *Entry
			}{{base, oldE}, {head, newE}} {
				if side.e != nil && side.e.Type == TypeFile {
					if side.e.SHA256, err = HashFile(side.t, p); err != nil {
						return err
					}
				}
			}
		}
		if !Same(oldE, newE) {
			out = append(out, Delta{Path: p, Old: oldE, New: newE})
		}
		// A directory the diff named may have been renamed or replaced
		// (a new inode under the old name): every path under it is
		// compared, on both sides.
		oldDir, newDir := oldE != nil && oldE.Type == TypeDir, newE != nil && newE.Type == TypeDir
		var kids []string
		for _, side := range []struct {
			t   Tree
			dir bool
		}{{base, oldDir}, {head, newDir}} {
			if !side.dir {
				continue
			}
			infos, err := side.t.ReadDir(p)
			if err != nil {
				return err
			}
			for _, fi := range infos {
				if o.Ignore != nil && o.Ignore(path.Join(p, fi.Name())) {
					continue
				}
				kids = append(kids, path.Join(p, fi.Name()))
			}
		}
		for _, k := range kids {
			if err := visit(k); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range paths {
		p = strings.TrimPrefix(path.Clean("/"+p), "/")
		if p == "" {
			continue
		}
		if err := visit(p); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b Delta) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// Same reports whether two entries are equal in type, mode, mtime,
// symlink target and, for files, size and (when both were hashed)
// content. A directory's mtime is left out: it moves with its entries.
func Same(a, b *Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Type != b.Type || a.Mode != b.Mode || a.Target != b.Target {
		return false
	}
	if a.Type == TypeDir {
		return true
	}
	if a.Type == TypeFile && (a.Size != b.Size || (a.SHA256 != "" && b.SHA256 != "" && a.SHA256 != b.SHA256)) {
		return false
	}
	return a.Mtime.Equal(b.Mtime)
}

package control

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// The file endpoints let a client without a mount (an agent in a sandbox)
// work on a branch's files through the branch's view directly:
//
//	POST /v1/branches/{name}/files/read    FileReadRequest   -> FileReadResult
//	POST /v1/branches/{name}/files/write   FileWriteRequest  -> FileWriteResult
//	POST /v1/branches/{name}/files/edit    FileEditRequest   -> FileEditResult
//	POST /v1/branches/{name}/files/list    FileListRequest   -> FileListResult
//	POST /v1/branches/{name}/files/search  FileSearchRequest -> FileSearchResult
//	POST /v1/branches/{name}/files/delete  FileDeleteRequest -> FileDeleteResult
//	POST /v1/branches/{name}/files/move    FileMoveRequest   -> FileMoveResult
//
// Paths are relative to the branch's root and confined to it: an absolute
// path, a ".." component, and a symlink whose target leaves the branch
// (absolute, or climbing above the root) are refused with code
// outside_branch. New files and directories belong to the owner of the
// branch's root.

// File operation bounds.
const (
	// DefaultReadLimit and MaxReadLimit bound the bytes one read returns.
	DefaultReadLimit = 256 << 10
	MaxReadLimit     = 4 << 20
	// MaxWriteBytes bounds one write (the request body is bounded too).
	MaxWriteBytes = 16 << 20
	// DefaultListLimit and DefaultSearchLimit bound the entries and
	// matches one answer carries.
	DefaultListLimit   = 1000
	DefaultSearchLimit = 100
	// maxSearchFile: larger files are skipped by search.
	maxSearchFile = 8 << 20
	// maxLineText bounds the text of one search match.
	maxLineText = 500
	// maxSymlinkHops bounds the symlinks one path resolution follows.
	maxSymlinkHops = 40
	// fileBodyLimit bounds a file request's JSON body.
	fileBodyLimit = MaxWriteBytes*4/3 + 1<<20
)

// FileReadRequest reads Limit bytes (default DefaultReadLimit) from Offset.
type FileReadRequest struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Limit  int64  `json:"limit,omitempty"`
}

// FileReadResult is what a read returned: Content when it is UTF-8 text,
// else ContentBase64.
type FileReadResult struct {
	Path          string `json:"path"`
	Size          int64  `json:"size"`
	Offset        int64  `json:"offset"`
	Bytes         int    `json:"bytes"`
	EOF           bool   `json:"eof"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

// FileWriteRequest creates or replaces a file with Content (or the bytes
// of ContentBase64), creating missing parent directories. Mode defaults
// to 0644 for a new file; an existing file keeps its mode.
type FileWriteRequest struct {
	Path          string  `json:"path"`
	Content       string  `json:"content,omitempty"`
	ContentBase64 string  `json:"content_base64,omitempty"`
	Mode          *uint32 `json:"mode,omitempty"`
}

// FileWriteResult says what a write did.
type FileWriteResult struct {
	Path    string `json:"path"`
	Bytes   int    `json:"bytes"`
	Created bool   `json:"created"`
}

// FileEditRequest replaces OldString by NewString in a text file. OldString
// must occur exactly once, unless ReplaceAll.
type FileEditRequest struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// FileEditResult says how many occurrences an edit replaced.
type FileEditResult struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
	Bytes        int    `json:"bytes"`
}

// FileListRequest lists the directory Path (default the root). Glob keeps
// the entries below Path that match it, at any depth: "*.go" matches the
// last component, a glob with "/" the whole path below Path
// ("src/**/*_test.go"). Recursive descends into subdirectories (a glob
// implies it). At most Limit entries (default DefaultListLimit).
type FileListRequest struct {
	Path      string `json:"path,omitempty"`
	Glob      string `json:"glob,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// FileEntry is one listed entry.
type FileEntry struct {
	Path   string `json:"path"` // relative to the branch's root
	Type   string `json:"type"` // file, dir, symlink, other
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"`
	Target string `json:"target,omitempty"` // symlink
}

// FileListResult is a listing; Truncated when Limit cut it.
type FileListResult struct {
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}

// FileSearchRequest searches the regular files under Path (default the
// root) whose path matches Glob (default all) for the Go regular
// expression Pattern, line by line. Binary files (a NUL byte, or not
// UTF-8) and files above 8 MiB are skipped. At most Limit matches
// (default DefaultSearchLimit).
type FileSearchRequest struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
	Glob    string `json:"glob,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

// FileMatch is one matching line (its text cut at 500 bytes).
type FileMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// FileSearchResult lists the matches; Truncated when Limit cut them.
type FileSearchResult struct {
	Matches      []FileMatch `json:"matches"`
	Truncated    bool        `json:"truncated"`
	FilesScanned int         `json:"files_scanned"`
	FilesSkipped int         `json:"files_skipped"` // binary or too large
}

// FileDeleteRequest removes a file, a symlink (not its target) or an
// empty directory; Recursive removes a directory with its contents.
type FileDeleteRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// FileDeleteResult counts the entries a delete removed.
type FileDeleteResult struct {
	Path    string `json:"path"`
	Removed int    `json:"removed"`
}

// FileMoveRequest renames From to To, creating To's missing parents. An
// existing To is refused (code exists) unless Overwrite.
type FileMoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// FileMoveResult confirms a move.
type FileMoveResult struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// viewer is a Backend that gives a branch's view (*branches.Manager).
type viewer interface {
	View(name string) (*cowfs.View, branches.Info, error)
}

func (s *Server) fileRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/branches/{name}/files/read", fileHandler(s, fileRead))
	mux.HandleFunc("POST /v1/branches/{name}/files/write", fileHandler(s, fileWrite))
	mux.HandleFunc("POST /v1/branches/{name}/files/edit", fileHandler(s, fileEdit))
	mux.HandleFunc("POST /v1/branches/{name}/files/list", fileHandler(s, fileList))
	mux.HandleFunc("POST /v1/branches/{name}/files/search", fileHandler(s, fileSearch))
	mux.HandleFunc("POST /v1/branches/{name}/files/delete", fileHandler(s, fileDelete))
	mux.HandleFunc("POST /v1/branches/{name}/files/move", fileHandler(s, fileMove))
}

// fileHandler decodes the request, finds the branch's view and runs op.
func fileHandler[In, Out any](s *Server, op func(ctx context.Context, b *branchFiles, in In) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		if err := decodeLimit(w, r, &in, fileBodyLimit); err != nil {
			s.fail(w, r, err)
			return
		}
		vw, ok := s.opts.Backend.(viewer)
		if !ok {
			s.fail(w, r, fmt.Errorf("%w: this server gives no access to branch files", ErrBadRequest))
			return
		}
		name := r.PathValue("name")
		v, _, err := vw.View(name)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		root, err := v.GetAttr(cowfs.RootIno)
		if err != nil {
			s.fail(w, r, fileErr(name, "", err))
			return
		}
		out, err := op(r.Context(), &branchFiles{v: v, branch: name, root: root}, in)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// branchFiles is one request's access to a branch's files.
type branchFiles struct {
	v      *cowfs.View
	branch string
	root   cowfs.Attr
}

// fileErr turns a cowfs error about p into an API error.
func fileErr(branch, p string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	where := fmt.Sprintf("%s in branch %s", p, branch)
	switch errno {
	case syscall.ENOENT:
		return fmt.Errorf("%w: %s: no such file or directory", branches.ErrNotFound, where)
	case syscall.EEXIST:
		return fmt.Errorf("%w: %s: exists", branches.ErrExists, where)
	case syscall.ESTALE:
		return fmt.Errorf("%w: branch %s was committed, aborted or invalidated while %s was in use", branches.ErrStale, branch, p)
	case syscall.ENOSPC:
		return fmt.Errorf("%w: %s: %v", branches.ErrNoSpace, where, err)
	case syscall.ENOTDIR, syscall.EISDIR, syscall.ENOTEMPTY, syscall.EINVAL, syscall.ENAMETOOLONG, syscall.ELOOP, syscall.EFBIG:
		return fmt.Errorf("%w: %s: %v", ErrBadRequest, where, errno)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// splitRel checks a path given by a client and splits it into components.
func splitRel(p string) ([]string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return nil, fmt.Errorf("%w: path %q holds a NUL byte", ErrBadRequest, p)
	}
	if strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%w: %q is absolute: paths are relative to the branch's root (drop the leading /)", ErrOutsideBranch, p)
	}
	var out []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			return nil, fmt.Errorf("%w: %q has a \"..\" component: paths stay inside the branch (write it without \"..\")", ErrOutsideBranch, p)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// resolved is a path resolved inside a branch.
type resolved struct {
	path   string     // the real path, symlinks resolved, relative to the root
	dir    cowfs.Attr // the parent directory
	name   string     // the last component ("" for the root)
	a      cowfs.Attr // valid if exists
	exists bool
}

// resolve walks p from the root. Symlinks on the way, and the last one if
// follow, are followed as long as they stay inside the branch. A missing
// last component is not an error (exists is false); a missing directory
// on the way is.
func (b *branchFiles) resolve(p string, follow bool) (resolved, error) {
	parts, err := splitRel(p)
	if err != nil {
		return resolved{}, err
	}
	stack := []cowfs.Attr{b.root} // the directories of real
	var real []string
	hops := 0
	cur := b.root
	for len(parts) > 0 {
		name := parts[0]
		parts = parts[1:]
		switch name {
		case "", ".":
			if len(parts) == 0 {
				return resolved{path: strings.Join(real, "/"), dir: cur, a: cur, exists: true}, nil
			}
			continue
		case "..": // only from a symlink's target
			if len(real) == 0 {
				return resolved{}, fmt.Errorf("%w: %q: a symlink on the way climbs above the branch's root", ErrOutsideBranch, p)
			}
			real, stack = real[:len(real)-1], stack[:len(stack)-1]
			cur = stack[len(stack)-1]
			if len(parts) == 0 {
				return resolved{path: strings.Join(real, "/"), dir: cur, a: cur, exists: true}, nil
			}
			continue
		}
		if cur.Type != cowfs.TypeDir {
			return resolved{}, fmt.Errorf("%w: %q: %s is not a directory", ErrBadRequest, p, strings.Join(real, "/"))
		}
		a, err := b.v.Lookup(cur.Ino, name)
		last := len(parts) == 0
		if errors.Is(err, syscall.ENOENT) && last {
			return resolved{path: path.Join(append(append([]string{}, real...), name)...), dir: cur, name: name}, nil
		}
		if err != nil {
			return resolved{}, fileErr(b.branch, path.Join(append(append([]string{}, real...), name)...), err)
		}
		if a.Type == cowfs.TypeSymlink && (!last || follow) {
			if hops++; hops > maxSymlinkHops {
				return resolved{}, fmt.Errorf("%w: %q: more than %d symlinks", ErrBadRequest, p, maxSymlinkHops)
			}
			target, err := b.v.Readlink(a.Ino)
			if err != nil {
				return resolved{}, fileErr(b.branch, p, err)
			}
			if strings.HasPrefix(target, "/") {
				return resolved{}, fmt.Errorf("%w: %q: symlink %s points to %s, outside the branch", ErrOutsideBranch, p,
					path.Join(append(append([]string{}, real...), name)...), target)
			}
			parts = append(strings.Split(target, "/"), parts...)
			continue
		}
		real = append(real, name)
		if last {
			return resolved{path: strings.Join(real, "/"), dir: cur, name: name, a: a, exists: true}, nil
		}
		stack = append(stack, a)
		cur = a
	}
	return resolved{path: "", dir: b.root, a: b.root, exists: true}, nil
}

// mkdirAll makes the directory p and its missing parents and returns it.
func (b *branchFiles) mkdirAll(p string) (cowfs.Attr, error) {
	r, err := b.resolve(p, true)
	if err == nil && r.exists {
		if r.a.Type != cowfs.TypeDir {
			return cowfs.Attr{}, fmt.Errorf("%w: %s in branch %s is not a directory", ErrBadRequest, r.path, b.branch)
		}
		return r.a, nil
	}
	if err != nil && !errors.Is(err, branches.ErrNotFound) {
		return cowfs.Attr{}, err
	}
	parts, _ := splitRel(p)
	cur := b.root
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		r, err := b.resolve(sub, true)
		if err != nil {
			return cowfs.Attr{}, err
		}
		if !r.exists {
			a, err := b.v.Mkdir(r.dir.Ino, r.name, cowfs.NewAttr{Mode: 0o755, UID: b.root.UID, GID: b.root.GID})
			if errors.Is(err, fs.ErrExist) {
				a, err = b.v.Lookup(r.dir.Ino, r.name)
			}
			if err != nil {
				return cowfs.Attr{}, fileErr(b.branch, sub, err)
			}
			cur = a
			continue
		}
		if r.a.Type != cowfs.TypeDir {
			return cowfs.Attr{}, fmt.Errorf("%w: %s in branch %s is not a directory", ErrBadRequest, sub, b.branch)
		}
		cur = r.a
	}
	return cur, nil
}

// existingFile resolves p, following symlinks, to a regular file.
func (b *branchFiles) existingFile(p string) (resolved, error) {
	r, err := b.resolve(p, true)
	if err != nil {
		return r, err
	}
	if !r.exists {
		return r, fmt.Errorf("%w: %s in branch %s: no such file", branches.ErrNotFound, p, b.branch)
	}
	if r.a.Type != cowfs.TypeRegular {
		return r, fmt.Errorf("%w: %s in branch %s is a %s, not a regular file", ErrBadRequest, p, b.branch, typeName(r.a.Type))
	}
	return r, nil
}

func typeName(t cowfs.FileType) string {
	switch t {
	case cowfs.TypeRegular:
		return "file"
	case cowfs.TypeDir:
		return "dir"
	case cowfs.TypeSymlink:
		return "symlink"
	}
	return "other"
}

// readAll reads a whole regular file.
func (b *branchFiles) readAll(r resolved) ([]byte, error) {
	buf := make([]byte, r.a.Size)
	off := 0
	for off < len(buf) {
		n, eof, err := b.v.ReadAt(r.a.Ino, buf[off:], int64(off))
		off += n
		if err != nil {
			return nil, fileErr(b.branch, r.path, err)
		}
		if eof || n == 0 {
			break
		}
	}
	return buf[:off], nil
}

// writeAll replaces the content of file ino with data.
func (b *branchFiles) writeAll(p string, ino cowfs.InodeID, data []byte) error {
	zero := uint64(0)
	if _, err := b.v.SetAttr(ino, cowfs.SetAttr{Size: &zero}); err != nil {
		return fileErr(b.branch, p, err)
	}
	const chunk = 1 << 20
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		if _, err := b.v.WriteAt(ino, data[off:end], int64(off)); err != nil {
			return fileErr(b.branch, p, err)
		}
	}
	return nil
}

func fileRead(_ context.Context, b *branchFiles, in FileReadRequest) (FileReadResult, error) {
	if in.Offset < 0 || in.Limit < 0 {
		return FileReadResult{}, fmt.Errorf("%w: offset and limit must not be negative", ErrBadRequest)
	}
	limit := in.Limit
	if limit == 0 {
		limit = DefaultReadLimit
	}
	limit = min(limit, MaxReadLimit)
	r, err := b.existingFile(in.Path)
	if err != nil {
		return FileReadResult{}, err
	}
	size := int64(r.a.Size)
	res := FileReadResult{Path: r.path, Size: size, Offset: in.Offset}
	if in.Offset >= size {
		res.EOF = true
		return res, nil
	}
	buf := make([]byte, min(limit, size-in.Offset))
	n := 0
	for n < len(buf) {
		m, eof, err := b.v.ReadAt(r.a.Ino, buf[n:], in.Offset+int64(n))
		n += m
		if err != nil {
			return FileReadResult{}, fileErr(b.branch, r.path, err)
		}
		if eof || m == 0 {
			break
		}
	}
	buf = buf[:n]
	eof := in.Offset+int64(n) >= size
	if !eof && !utf8.Valid(buf) {
		// The limit may cut a character of a text: stop before it (the
		// next read starts with it).
		for k := 1; k <= utf8.UTFMax-1 && k < len(buf); k++ {
			if utf8.Valid(buf[:len(buf)-k]) {
				buf = buf[:len(buf)-k]
				break
			}
		}
	}
	n = len(buf)
	res.Bytes, res.EOF = n, in.Offset+int64(n) >= size
	if utf8.Valid(buf) {
		res.Content = string(buf)
	} else {
		res.ContentBase64 = base64.StdEncoding.EncodeToString(buf)
	}
	return res, nil
}

func fileWrite(_ context.Context, b *branchFiles, in FileWriteRequest) (FileWriteResult, error) {
	data := []byte(in.Content)
	if in.ContentBase64 != "" {
		if in.Content != "" {
			return FileWriteResult{}, fmt.Errorf("%w: give content or content_base64, not both", ErrBadRequest)
		}
		d, err := base64.StdEncoding.DecodeString(in.ContentBase64)
		if err != nil {
			return FileWriteResult{}, fmt.Errorf("%w: content_base64: %v", ErrBadRequest, err)
		}
		data = d
	}
	if len(data) > MaxWriteBytes {
		return FileWriteResult{}, fmt.Errorf("%w: %d bytes: one write takes at most %d; write a larger file through a mount", ErrBadRequest, len(data), MaxWriteBytes)
	}
	if in.Mode != nil && *in.Mode&^0o7777 != 0 {
		return FileWriteResult{}, fmt.Errorf("%w: mode %o: want permission bits such as 0644 (420) or 0755 (493)", ErrBadRequest, *in.Mode)
	}
	if parts, err := splitRel(in.Path); err != nil {
		return FileWriteResult{}, err
	} else if len(parts) == 0 {
		return FileWriteResult{}, fmt.Errorf("%w: write needs a file path, not the branch's root", ErrBadRequest)
	}
	r, err := b.resolve(in.Path, true)
	if errors.Is(err, branches.ErrNotFound) {
		// A missing directory on the way: make it.
		if _, err = b.mkdirAll(path.Dir(in.Path)); err == nil {
			r, err = b.resolve(in.Path, true)
		}
	}
	if err != nil {
		return FileWriteResult{}, err
	}
	res := FileWriteResult{Path: r.path, Bytes: len(data)}
	a := r.a
	if !r.exists {
		mode := uint32(0o644)
		if in.Mode != nil {
			mode = *in.Mode
		}
		a, err = b.v.Create(r.dir.Ino, r.name, cowfs.CreateUnchecked, cowfs.NewAttr{Mode: mode, UID: b.root.UID, GID: b.root.GID}, 0)
		if err != nil {
			return FileWriteResult{}, fileErr(b.branch, r.path, err)
		}
		res.Created = true
	} else if a.Type != cowfs.TypeRegular {
		return FileWriteResult{}, fmt.Errorf("%w: %s in branch %s is a %s, not a regular file", ErrBadRequest, r.path, b.branch, typeName(a.Type))
	} else if in.Mode != nil {
		if _, err := b.v.SetAttr(a.Ino, cowfs.SetAttr{Mode: in.Mode}); err != nil {
			return FileWriteResult{}, fileErr(b.branch, r.path, err)
		}
	}
	if err := b.writeAll(r.path, a.Ino, data); err != nil {
		return FileWriteResult{}, err
	}
	return res, nil
}

func fileEdit(_ context.Context, b *branchFiles, in FileEditRequest) (FileEditResult, error) {
	if in.OldString == "" {
		return FileEditResult{}, fmt.Errorf("%w: old_string is empty: give the exact text to replace", ErrBadRequest)
	}
	if in.OldString == in.NewString {
		return FileEditResult{}, fmt.Errorf("%w: old_string and new_string are the same", ErrBadRequest)
	}
	r, err := b.existingFile(in.Path)
	if err != nil {
		return FileEditResult{}, err
	}
	if r.a.Size > MaxWriteBytes {
		return FileEditResult{}, fmt.Errorf("%w: %s is %d bytes: edit takes files up to %d", ErrBadRequest, r.path, r.a.Size, MaxWriteBytes)
	}
	data, err := b.readAll(r)
	if err != nil {
		return FileEditResult{}, err
	}
	n := bytes.Count(data, []byte(in.OldString))
	switch {
	case n == 0:
		return FileEditResult{}, fmt.Errorf("%w: old_string does not occur in %s: read the file and copy the text exactly, whitespace included", ErrNoMatch, r.path)
	case n > 1 && !in.ReplaceAll:
		return FileEditResult{}, fmt.Errorf("%w: old_string occurs %d times in %s: add surrounding lines to make it unique, or set replace_all", ErrNotUnique, n, r.path)
	}
	out := bytes.ReplaceAll(data, []byte(in.OldString), []byte(in.NewString))
	if len(out) > MaxWriteBytes {
		return FileEditResult{}, fmt.Errorf("%w: the edited file would be %d bytes, above %d", ErrBadRequest, len(out), MaxWriteBytes)
	}
	if err := b.writeAll(r.path, r.a.Ino, out); err != nil {
		return FileEditResult{}, err
	}
	return FileEditResult{Path: r.path, Replacements: n, Bytes: len(out)}, nil
}

// walkFn is called for each entry below a directory, with its path
// relative to the listed directory and to the root; returning false stops.
type walkFn func(rel, full string, e cowfs.DirEntry, a cowfs.Attr) (descend, more bool, err error)

// walk visits the entries under directory dir (at path base), depth first
// in directory order; symlinks are not followed.
func (b *branchFiles) walk(ctx context.Context, dir cowfs.InodeID, base, rel string, fn walkFn) (bool, error) {
	var cookie uint64
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		ents, eof, err := b.v.ReadDir(dir, cookie, 1024)
		if err != nil {
			return false, fileErr(b.branch, base, err)
		}
		for _, e := range ents {
			cookie = e.Cookie
			if e.Name == "." || e.Name == ".." {
				continue
			}
			a, err := b.v.Lookup(dir, e.Name)
			if errors.Is(err, syscall.ENOENT) {
				continue // removed meanwhile
			}
			if err != nil {
				return false, fileErr(b.branch, path.Join(base, e.Name), err)
			}
			r, full := path.Join(rel, e.Name), path.Join(base, e.Name)
			descend, more, err := fn(r, full, e, a)
			if err != nil || !more {
				return false, err
			}
			if descend && a.Type == cowfs.TypeDir {
				if more, err := b.walk(ctx, a.Ino, full, r, fn); err != nil || !more {
					return false, err
				}
			}
		}
		if eof || len(ents) == 0 {
			return true, nil
		}
	}
}

// dirOf resolves p (following symlinks) to a directory.
func (b *branchFiles) dirOf(p string) (resolved, error) {
	r, err := b.resolve(p, true)
	if err != nil {
		return r, err
	}
	if !r.exists {
		return r, fmt.Errorf("%w: %s in branch %s: no such directory", branches.ErrNotFound, p, b.branch)
	}
	if r.a.Type != cowfs.TypeDir {
		return r, fmt.Errorf("%w: %s in branch %s is a %s, not a directory", ErrBadRequest, p, b.branch, typeName(r.a.Type))
	}
	return r, nil
}

func fileList(ctx context.Context, b *branchFiles, in FileListRequest) (FileListResult, error) {
	if in.Limit < 0 {
		return FileListResult{}, fmt.Errorf("%w: limit must not be negative", ErrBadRequest)
	}
	limit := in.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if err := checkGlob(in.Glob); err != nil {
		return FileListResult{}, err
	}
	d, err := b.dirOf(in.Path)
	if err != nil {
		return FileListResult{}, err
	}
	recursive := in.Recursive || in.Glob != ""
	res := FileListResult{Entries: []FileEntry{}}
	_, err = b.walk(ctx, d.a.Ino, d.path, "", func(rel, full string, e cowfs.DirEntry, a cowfs.Attr) (bool, bool, error) {
		if in.Glob == "" || matchGlob(in.Glob, rel) {
			if len(res.Entries) == limit {
				res.Truncated = true
				return false, false, nil
			}
			fe := FileEntry{Path: full, Type: typeName(a.Type), Size: int64(a.Size), Mode: a.Mode & 0o7777}
			if a.Type == cowfs.TypeSymlink {
				fe.Target, _ = b.v.Readlink(a.Ino)
			}
			res.Entries = append(res.Entries, fe)
		}
		return recursive, true, nil
	})
	sort.Slice(res.Entries, func(i, k int) bool { return res.Entries[i].Path < res.Entries[k].Path })
	return res, err
}

func fileSearch(ctx context.Context, b *branchFiles, in FileSearchRequest) (FileSearchResult, error) {
	if in.Pattern == "" {
		return FileSearchResult{}, fmt.Errorf("%w: search needs a pattern", ErrBadRequest)
	}
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return FileSearchResult{}, fmt.Errorf("%w: pattern: %v (Go RE2 syntax)", ErrBadRequest, err)
	}
	if in.Limit < 0 {
		return FileSearchResult{}, fmt.Errorf("%w: limit must not be negative", ErrBadRequest)
	}
	if err := checkGlob(in.Glob); err != nil {
		return FileSearchResult{}, err
	}
	limit := in.Limit
	if limit == 0 {
		limit = DefaultSearchLimit
	}
	d, err := b.dirOf(in.Path)
	if err != nil {
		return FileSearchResult{}, err
	}
	res := FileSearchResult{Matches: []FileMatch{}}
	_, err = b.walk(ctx, d.a.Ino, d.path, "", func(rel, full string, e cowfs.DirEntry, a cowfs.Attr) (bool, bool, error) {
		if a.Type != cowfs.TypeRegular {
			return true, true, nil
		}
		if in.Glob != "" && !matchGlob(in.Glob, rel) {
			return true, true, nil
		}
		if a.Size > maxSearchFile {
			res.FilesSkipped++
			return true, true, nil
		}
		data, err := b.readAll(resolved{path: full, a: a})
		if err != nil {
			return false, false, err
		}
		if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
			res.FilesSkipped++
			return true, true, nil
		}
		res.FilesScanned++
		line := 0
		for len(data) > 0 {
			line++
			l := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				l, data = data[:i], data[i+1:]
			} else {
				data = nil
			}
			if !re.Match(l) {
				continue
			}
			if len(res.Matches) == limit {
				res.Truncated = true
				return false, false, nil
			}
			text := l
			if len(text) > maxLineText {
				text = text[:maxLineText]
			}
			res.Matches = append(res.Matches, FileMatch{Path: full, Line: line, Text: strings.ToValidUTF8(string(text), "\uFFFD")})
		}
		return true, true, nil
	})
	sort.SliceStable(res.Matches, func(i, k int) bool { return res.Matches[i].Path < res.Matches[k].Path })
	return res, err
}

func fileDelete(ctx context.Context, b *branchFiles, in FileDeleteRequest) (FileDeleteResult, error) {
	r, err := b.resolve(in.Path, false)
	if err != nil {
		return FileDeleteResult{}, err
	}
	if r.name == "" && r.exists {
		return FileDeleteResult{}, fmt.Errorf("%w: delete needs a path below the branch's root", ErrBadRequest)
	}
	if !r.exists {
		return FileDeleteResult{}, fmt.Errorf("%w: %s in branch %s: no such file or directory", branches.ErrNotFound, in.Path, b.branch)
	}
	res := FileDeleteResult{Path: r.path}
	if r.a.Type == cowfs.TypeDir {
		if in.Recursive {
			n, err := b.removeTree(ctx, r.a.Ino, r.path)
			res.Removed += n
			if err != nil {
				return res, err
			}
		}
		if err := b.v.Rmdir(r.dir.Ino, r.name); err != nil {
			if errors.Is(err, syscall.ENOTEMPTY) {
				return res, fmt.Errorf("%w: %s in branch %s is a directory that is not empty: set recursive to delete it with its contents", ErrBadRequest, r.path, b.branch)
			}
			return res, fileErr(b.branch, r.path, err)
		}
		res.Removed++
		return res, nil
	}
	if err := b.v.Unlink(r.dir.Ino, r.name); err != nil {
		return res, fileErr(b.branch, r.path, err)
	}
	res.Removed++
	return res, nil
}

// removeTree removes what directory dir holds.
func (b *branchFiles) removeTree(ctx context.Context, dir cowfs.InodeID, p string) (int, error) {
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		ents, _, err := b.v.ReadDir(dir, 0, 1024)
		if err != nil {
			return n, fileErr(b.branch, p, err)
		}
		removed := 0
		for _, e := range ents {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			full := path.Join(p, e.Name)
			if e.Type == cowfs.TypeDir {
				a, err := b.v.Lookup(dir, e.Name)
				if err != nil {
					return n, fileErr(b.branch, full, err)
				}
				m, err := b.removeTree(ctx, a.Ino, full)
				n += m
				if err != nil {
					return n, err
				}
				err = b.v.Rmdir(dir, e.Name)
				if err != nil {
					return n, fileErr(b.branch, full, err)
				}
			} else if err := b.v.Unlink(dir, e.Name); err != nil {
				return n, fileErr(b.branch, full, err)
			}
			n++
			removed++
		}
		if removed == 0 {
			return n, nil
		}
	}
}

func fileMove(_ context.Context, b *branchFiles, in FileMoveRequest) (FileMoveResult, error) {
	from, err := b.resolve(in.From, false)
	if err != nil {
		return FileMoveResult{}, err
	}
	if !from.exists {
		return FileMoveResult{}, fmt.Errorf("%w: %s in branch %s: no such file or directory", branches.ErrNotFound, in.From, b.branch)
	}
	if from.name == "" {
		return FileMoveResult{}, fmt.Errorf("%w: the branch's root cannot be moved", ErrBadRequest)
	}
	if parts, err := splitRel(in.To); err != nil {
		return FileMoveResult{}, err
	} else if len(parts) == 0 {
		return FileMoveResult{}, fmt.Errorf("%w: move needs a destination path, not the branch's root", ErrBadRequest)
	}
	if _, err := b.mkdirAll(path.Dir(in.To)); err != nil {
		return FileMoveResult{}, err
	}
	to, err := b.resolve(in.To, false)
	if err != nil {
		return FileMoveResult{}, err
	}
	if to.exists && !in.Overwrite {
		return FileMoveResult{}, fmt.Errorf("%w: %s in branch %s exists: set overwrite to replace it", branches.ErrExists, to.path, b.branch)
	}
	if from.a.Type == cowfs.TypeDir && (to.path == from.path || strings.HasPrefix(to.path+"/", from.path+"/")) {
		return FileMoveResult{}, fmt.Errorf("%w: cannot move %s into itself", ErrBadRequest, from.path)
	}
	if err := b.v.Rename(from.dir.Ino, from.name, to.dir.Ino, to.name); err != nil {
		return FileMoveResult{}, fileErr(b.branch, from.path, err)
	}
	return FileMoveResult{From: from.path, To: to.path}, nil
}

// checkGlob validates a glob.
func checkGlob(g string) error {
	for _, seg := range strings.Split(g, "/") {
		if seg == "**" {
			continue
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("%w: glob %q: %v", ErrBadRequest, g, err)
		}
	}
	return nil
}

// matchGlob matches a slash-separated path against a glob whose segments
// are path.Match patterns, "**" matching any number of segments. A glob
// without "/" matches the last segment of the path at any depth (as
// "**/glob").
func matchGlob(glob, p string) bool {
	if !strings.Contains(glob, "/") && glob != "**" {
		ok, _ := path.Match(glob, path.Base(p))
		return ok
	}
	return matchSegs(strings.Split(glob, "/"), strings.Split(p, "/"))
}

func matchSegs(g, p []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			for i := 0; i <= len(p); i++ {
				if matchSegs(g[1:], p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 {
			return false
		}
		if ok, _ := path.Match(g[0], p[0]); !ok {
			return false
		}
		g, p = g[1:], p[1:]
	}
	return len(p) == 0
}

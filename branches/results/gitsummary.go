package results

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// PathChange is one path a diff reported, as SummarizeGit takes it.
type PathChange struct {
	Path  string
	Kind  string // "added", "modified" or "deleted"
	Bytes int64
}

// GitSummary says in one line what changed inside a repository's .git
// directory, instead of its hundreds of object files. JSON field names
// are part of the stable --json output.
type GitSummary struct {
	// HeadBefore and HeadAfter are the commits HEAD named in the base
	// and in the branch ("" where it names none, e.g. no .git).
	HeadBefore string `json:"head_before,omitempty"`
	HeadAfter  string `json:"head_after,omitempty"`
	// RefBefore and RefAfter are the refs HEAD pointed to
	// ("refs/heads/main"), "" when detached.
	RefBefore string `json:"ref_before,omitempty"`
	RefAfter  string `json:"ref_after,omitempty"`
	// RefsChanged lists the refs added, moved or deleted, sorted.
	RefsChanged []string `json:"refs_changed,omitempty"`
	// ObjectsAdded counts loose objects added, PacksAdded pack files.
	ObjectsAdded int `json:"objects_added"`
	PacksAdded   int `json:"packs_added"`
	// Files counts the paths under .git that changed, Bytes their bytes.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// HeadMoved reports whether HEAD names another commit or ref.
func (g *GitSummary) HeadMoved() bool {
	return g.HeadBefore != g.HeadAfter || g.RefBefore != g.RefAfter
}

// String is the summary as diff prints it.
func (g *GitSummary) String() string {
	var parts []string
	switch {
	case g.HeadMoved():
		parts = append(parts, fmt.Sprintf("HEAD %s -> %s", describeHead(g.HeadBefore, g.RefBefore), describeHead(g.HeadAfter, g.RefAfter)))
	default:
		parts = append(parts, "HEAD unchanged "+describeHead(g.HeadAfter, g.RefAfter))
	}
	parts = append(parts, plural(len(g.RefsChanged), "ref")+" changed")
	parts = append(parts, plural(g.ObjectsAdded, "object")+" added")
	if g.PacksAdded > 0 {
		parts = append(parts, plural(g.PacksAdded, "pack")+" added")
	}
	parts = append(parts, plural(g.Files, "file")+" under .git")
	return strings.Join(parts, ", ")
}

func describeHead(id, ref string) string {
	short := id
	if len(short) > 7 {
		short = short[:7]
	}
	if short == "" {
		short = "none"
	}
	if ref != "" {
		return QuotePath(short) + " (" + QuotePath(strings.TrimPrefix(ref, "refs/heads/")) + ")"
	}
	return QuotePath(short)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// SummarizeGit summarizes changes, the paths under .git a diff between
// base and head reported (see InGit), reading HEAD and the refs of both
// sides.
func SummarizeGit(base, head Tree, changes []PathChange) (*GitSummary, error) {
	g := &GitSummary{}
	for _, c := range changes {
		g.Files++
		g.Bytes += c.Bytes
		if c.Kind != "added" {
			continue
		}
		dir, file := path.Split(c.Path)
		switch {
		case dir == ".git/objects/pack/" && strings.HasSuffix(file, ".pack"):
			g.PacksAdded++
		case len(dir) == len(".git/objects/xx/") && strings.HasPrefix(dir, ".git/objects/") && len(file) >= 38 && isHex(dir[13:15]+file):
			g.ObjectsAdded++
		}
	}
	var before, after map[string]string
	var err error
	if g.HeadBefore, g.RefBefore, before, err = readRefs(base); err != nil {
		return nil, err
	}
	if g.HeadAfter, g.RefAfter, after, err = readRefs(head); err != nil {
		return nil, err
	}
	for name, id := range after {
		if before[name] != id {
			g.RefsChanged = append(g.RefsChanged, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			g.RefsChanged = append(g.RefsChanged, name)
		}
	}
	sort.Strings(g.RefsChanged)
	return g, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// maxRefFile bounds what is read of HEAD, a loose ref or packed-refs.
const maxRefFile = 64 << 20

func readSmall(t Tree, p string) ([]byte, error) {
	f, err := t.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRefFile))
}

// readRefs returns the commit HEAD names, the ref it points to, and every
// ref (loose refs over packed ones) of the repository at .git in t.
func readRefs(t Tree) (head, headRef string, refs map[string]string, err error) {
	refs = map[string]string{}
	if e, err := Stat(t, ".git"); err != nil || e == nil || e.Type != TypeDir {
		return "", "", refs, err
	}
	if b, err := readSmall(t, ".git/packed-refs"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' || line[0] == '^' {
				continue
			}
			if id, name, ok := strings.Cut(line, " "); ok {
				refs[name] = id
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", nil, err
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		infos, err := t.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, fi := range infos {
			p := dir + "/" + fi.Name()
			switch {
			case fi.IsDir():
				if err := walk(p); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				b, err := readSmall(t, p)
				if err != nil {
					return err
				}
				if id := strings.TrimSpace(string(b)); isHex(id) {
					refs[strings.TrimPrefix(p, ".git/")] = id
				}
			}
		}
		return nil
	}
	if err := walk(".git/refs"); err != nil {
		return "", "", nil, err
	}
	b, err := readSmall(t, ".git/HEAD")
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", refs, nil
	}
	if err != nil {
		return "", "", nil, err
	}
	s := strings.TrimSpace(string(b))
	if ref, ok := strings.CutPrefix(s, "ref: "); ok {
		return refs[ref], ref, refs, nil
	}
	return s, "", refs, nil
}

package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// Apply writes deltas into a folder of the user's, three-way: a path is
// written only where the folder still holds the base's state (or
// already the head's); anywhere else it is a conflict and nothing at all
// is written. Writing is as close to all-or-nothing as a plain
// filesystem allows (see Applier.Run): new content is staged in the
// folder's hidden directory StageDir, originals are kept there until
// the end, and a journal there lets a later run complete an apply that
// was cut short (Recover).

// StageDir is the hidden directory, at the top of the folder, where an
// apply stages content, keeps originals and writes its journal.
const StageDir = ".branchnfs-apply"

const journalName = "journal.json"

// Conflict is a path the folder changed on its side.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Plan is what an apply would do to a folder.
type Plan struct {
	// Changes are the deltas to write, sorted by path.
	Changes []Delta `json:"changes"`
	// Already lists the paths the folder already holds as the head does.
	Already []string `json:"already,omitempty"`
	// Conflicts lists the paths that changed in the folder too; when
	// there are any, nothing is written.
	Conflicts []Conflict `json:"conflicts,omitempty"`
	// Skipped lists the paths left alone: .git (unless WithGit), and
	// FIFOs, sockets and devices.
	Skipped []string `json:"skipped,omitempty"`
}

// PlanOptions tune PlanApply.
type PlanOptions struct {
	// WithGit applies the paths under .git too; by default they are
	// skipped (a repository's history comes back as commits, never by
	// overwriting its files).
	WithGit bool
}

// RootTree returns the folder of root as a Tree, confined to it.
func RootTree(root *os.Root) Tree { return rootTree{root} }

type rootTree struct{ r *os.Root }

func rel(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func (t rootTree) Lstat(p string) (os.FileInfo, error)  { return t.r.Lstat(rel(p)) }
func (t rootTree) Readlink(p string) (string, error)    { return t.r.Readlink(rel(p)) }
func (t rootTree) Open(p string) (io.ReadCloser, error) { return t.r.Open(rel(p)) }
func (t rootTree) ReadDir(p string) ([]os.FileInfo, error) {
	f, err := t.r.Open(rel(p))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]os.FileInfo, 0, len(ents))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			out = append(out, fi)
		}
	}
	slices.SortFunc(out, func(a, b os.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// matches reports whether the folder's entry cur is the state e, for an
// apply: same type, content (hash), symlink target and, for files, mode;
// a directory's mode counts only when checkMode (the delta changes it).
func matches(cur, e *Entry, checkMode bool) bool {
	if cur == nil || e == nil {
		return cur == e
	}
	if cur.Type != e.Type {
		return false
	}
	switch e.Type {
	case TypeFile:
		return cur.SHA256 == e.SHA256 && cur.Mode == e.Mode
	case TypeSymlink:
		return cur.Target == e.Target
	case TypeDir:
		return !checkMode || cur.Mode == e.Mode
	}
	return false
}

// conflictReason says why the folder's cur is neither d.Old nor d.New.
func conflictReason(d Delta, cur *Entry) string {
	switch {
	case cur == nil:
		return "missing in the folder, which the branch changed"
	case d.Old == nil:
		return fmt.Sprintf("the branch adds it, and the folder has a different %s there", cur.Type)
	case cur.Type != d.Old.Type:
		return fmt.Sprintf("a %s in the folder, a %s at the fork", cur.Type, d.Old.Type)
	case cur.Type == TypeFile && cur.SHA256 != d.Old.SHA256:
		return "changed in the folder since the fork"
	case cur.Type == TypeSymlink:
		return "symlink changed in the folder since the fork"
	}
	return fmt.Sprintf("mode %v in the folder, %v at the fork", cur.Mode, d.Old.Mode)
}

// PlanApply compares the folder of root with deltas (from a change set,
// with hashes) and returns what an apply would do.
func PlanApply(root *os.Root, deltas []Delta, o PlanOptions) (*Plan, error) {
	t := RootTree(root)
	p := &Plan{}
	// What the plan removes, for the check that a removed directory
	// holds nothing else.
	removed := map[string]bool{}
	created := map[string]bool{}
	for _, d := range deltas {
		if d.Old != nil && (d.New == nil || d.New.Type != d.Old.Type) {
			removed[d.Path] = true
		}
		if d.New != nil && d.New.Type == TypeDir {
			created[d.Path] = true
		}
	}
	for _, d := range deltas {
		if d.Path == StageDir || strings.HasPrefix(d.Path, StageDir+"/") ||
			(!o.WithGit && InGit(d.Path)) ||
			(d.Old != nil && d.Old.Type == TypeOther) || (d.New != nil && d.New.Type == TypeOther) {
			p.Skipped = append(p.Skipped, d.Path)
			continue
		}
		cur, err := Stat(t, d.Path)
		if err != nil {
			return nil, err
		}
		if cur != nil && cur.Type == TypeFile {
			if cur.SHA256, err = HashFile(t, d.Path); err != nil {
				return nil, err
			}
		}
		modeChange := d.Old != nil && d.New != nil && d.Old.Mode != d.New.Mode
		switch {
		case matches(cur, d.New, modeChange):
			p.Already = append(p.Already, d.Path)
			continue
		case !matches(cur, d.Old, modeChange):
			p.Conflicts = append(p.Conflicts, Conflict{Path: d.Path, Reason: conflictReason(d, cur)})
			continue
		}
		if cur != nil && cur.Type == TypeDir && removed[d.Path] {
			infos, err := t.ReadDir(d.Path)
			if err != nil {
				return nil, err
			}
			for _, fi := range infos {
				if k := path.Join(d.Path, fi.Name()); !removed[k] {
					p.Conflicts = append(p.Conflicts, Conflict{Path: k,
						Reason: fmt.Sprintf("only in the folder, in directory %s that the branch removes", QuotePath(d.Path))})
				}
			}
		}
		if d.New != nil {
			if dir := path.Dir(d.Path); dir != "." && !created[dir] {
				if e, err := Stat(t, dir); err != nil {
					return nil, err
				} else if e == nil || e.Type != TypeDir {
					p.Conflicts = append(p.Conflicts, Conflict{Path: d.Path, Reason: "its directory is missing in the folder"})
					continue
				}
			}
		}
		p.Changes = append(p.Changes, d)
	}
	return p, nil
}

// journal is StageDir/journal.json.
type journal struct {
	Branch string `json:"branch"`
	// State is "staging" (nothing in the folder changed yet: undo) or
	// "committing" (every new content is staged: complete).
	State string      `json:"state"`
	Steps []applyStep `json:"steps"`
}

// applyStep is one path's change, by kind: "put" (a file or symlink
// from Stage), "mkdir", "chmod" (a directory's mode) or "remove".
// Backup names where the original goes, in StageDir.
type applyStep struct {
	Path   string `json:"path"`
	Op     string `json:"op"`
	Stage  string `json:"stage,omitempty"`
	Backup string `json:"backup,omitempty"`
	New    *Entry `json:"new,omitempty"`
}

// Applier applies a Plan to the folder of Root.
type Applier struct {
	Root   *os.Root
	Branch string
	// AfterStep, when set, runs after each step of the commit phase with
	// the number of steps done (a test's pause point).
	AfterStep func(done int)
}

// Recovered says what Recover found.
type Recovered struct {
	Branch string `json:"branch"`
	// Action is "completed" (the apply had started changing the folder)
	// or "undone" (it had not).
	Action string `json:"action"`
}

// Recover finishes or undoes an apply that was cut short in the folder,
// and returns what it did, or nil when there was none.
func (a *Applier) Recover() (*Recovered, error) {
	b, err := a.Root.ReadFile(path.Join(StageDir, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := a.Root.Lstat(StageDir); err == nil {
			// Cut before its journal was written: nothing changed.
			return &Recovered{Action: "undone"}, a.Root.RemoveAll(StageDir)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("results: %s/%s: %v: the folder holds a broken apply journal; look at %s and remove it", StageDir, journalName, err, StageDir)
	}
	r := &Recovered{Branch: j.Branch}
	if j.State != "committing" {
		r.Action = "undone"
		return r, a.Root.RemoveAll(StageDir)
	}
	r.Action = "completed"
	return r, a.commit(&j)
}

// Run applies plan: stages every new file and symlink (content from
// stream, a change set with content, checked against the plan's
// hashes), then moves each into place and the originals into StageDir,
// then removes StageDir. Until the journal says "committing" an error
// undoes everything; after it, an error leaves the journal for Recover
// (run apply again) and every path old or new.
func (a *Applier) Run(plan *Plan, stream func(fn func(d Delta, content io.Reader) error) error) error {
	if len(plan.Conflicts) > 0 {
		return errors.New("results: the plan has conflicts")
	}
	if len(plan.Changes) == 0 {
		return nil
	}
	if err := a.Root.Mkdir(StageDir, 0o700); err != nil {
		return fmt.Errorf("results: staging the apply: %w (a %s left by an apply cut short is recovered first: run apply again)", err, StageDir)
	}
	j := &journal{Branch: a.Branch, State: "staging"}
	byPath := map[string]int{}
	for i, d := range plan.Changes {
		st := applyStep{Path: d.Path, New: d.New, Backup: fmt.Sprintf("b%d", i)}
		switch {
		case d.New == nil:
			st.Op = "remove"
		case d.New.Type == TypeDir && d.Old != nil && d.Old.Type == TypeDir:
			st.Op, st.Backup = "chmod", ""
		case d.New.Type == TypeDir:
			st.Op = "mkdir"
		default:
			st.Op, st.Stage = "put", fmt.Sprintf("s%d", i)
		}
		byPath[d.Path] = len(j.Steps)
		j.Steps = append(j.Steps, st)
	}
	undo := func(err error) error {
		a.Root.RemoveAll(StageDir)
		return err
	}
	if err := a.writeJournal(j); err != nil {
		return undo(err)
	}
	staged := 0
	err := stream(func(d Delta, content io.Reader) error {
		i, ok := byPath[d.Path]
		if !ok {
			return nil
		}
		st := j.Steps[i]
		if st.Op != "put" {
			return nil
		}
		if !Same(d.New, st.New) || (d.New != nil && d.New.SHA256 != st.New.SHA256) {
			return fmt.Errorf("results: %s changed in the branch while it was applied: run apply again", QuotePath(d.Path))
		}
		if err := a.stage(st, content); err != nil {
			return err
		}
		staged++
		return nil
	})
	if err != nil {
		return undo(err)
	}
	want := 0
	for _, st := range j.Steps {
		if st.Op == "put" {
			want++
		}
	}
	if staged != want {
		return undo(fmt.Errorf("results: the branch's content of %d of %d paths did not come: run apply again", want-staged, want))
	}
	// Staged content is durable before the journal says it may move.
	if err := syncStaged(a.Root, j); err != nil {
		return undo(fmt.Errorf("results: syncing the staged content: %w", err))
	}
	j.State = "committing"
	if err := a.writeJournal(j); err != nil {
		return undo(err)
	}
	return a.commit(j)
}

// stage writes a put step's new file or symlink as StageDir/st.Stage.
func (a *Applier) stage(st applyStep, content io.Reader) error {
	name := path.Join(StageDir, st.Stage)
	if st.New.Type == TypeSymlink {
		return a.Root.Symlink(st.New.Target, name)
	}
	if content == nil {
		return fmt.Errorf("results: no content for %s in the change set", QuotePath(st.Path))
	}
	f, err := a.Root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	hr := NewHashingReader(content)
	_, err = io.Copy(f, hr)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if hr.SHA256() != st.New.SHA256 {
		return fmt.Errorf("results: %s changed in the branch while it was applied: run apply again", QuotePath(st.Path))
	}
	if err := a.Root.Chmod(name, st.New.Mode); err != nil {
		return err
	}
	return a.Root.Chtimes(name, st.New.Mtime, st.New.Mtime)
}

func (a *Applier) writeJournal(j *journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	tmp := path.Join(StageDir, journalName+".tmp")
	f, err := a.Root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := a.Root.Rename(tmp, path.Join(StageDir, journalName)); err != nil {
		return err
	}
	return syncDir(a.Root, StageDir)
}

func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func exists(root *os.Root, name string) (os.FileInfo, bool) {
	fi, err := root.Lstat(name)
	return fi, err == nil
}

// commit runs every step (each is idempotent, so a Recover after a cut
// runs them all again), then fixes the new directories' modes and mtimes
// and removes StageDir.
func (a *Applier) commit(j *journal) error {
	done := 0
	step := func(st applyStep) error {
		if err := a.runStep(st); err != nil {
			return fmt.Errorf("results: applying %s: %w (the folder holds the old or the new state of every path; run apply again to complete it)", QuotePath(st.Path), err)
		}
		done++
		if a.AfterStep != nil {
			a.AfterStep(done)
		}
		return nil
	}
	// Removals first, children before their parents; then the rest,
	// parents before their children.
	for i := len(j.Steps) - 1; i >= 0; i-- {
		if j.Steps[i].Op == "remove" {
			if err := step(j.Steps[i]); err != nil {
				return err
			}
		}
	}
	for _, st := range j.Steps {
		if st.Op != "remove" {
			if err := step(st); err != nil {
				return err
			}
		}
	}
	for i := len(j.Steps) - 1; i >= 0; i-- {
		st := j.Steps[i]
		if st.Op == "mkdir" || st.Op == "chmod" {
			if err := a.Root.Chmod(st.Path, st.New.Mode); err != nil {
				return err
			}
			if err := a.Root.Chtimes(st.Path, st.New.Mtime, st.New.Mtime); err != nil {
				return err
			}
		}
	}
	return a.Root.RemoveAll(StageDir)
}

// moveAway moves the original at st.Path into StageDir/st.Backup, unless
// that was done already.
func (a *Applier) moveAway(st applyStep) error {
	if _, ok := exists(a.Root, st.Path); !ok {
		return nil
	}
	backup := path.Join(StageDir, st.Backup)
	if _, ok := exists(a.Root, backup); ok {
		return nil
	}
	return a.Root.Rename(st.Path, backup)
}

func (a *Applier) runStep(st applyStep) error {
	switch st.Op {
	case "remove":
		return a.moveAway(st)
	case "chmod":
		return a.Root.Chmod(st.Path, st.New.Mode|0o700)
	case "mkdir":
		if fi, ok := exists(a.Root, st.Path); ok && fi.IsDir() {
			return nil
		}
		if err := a.moveAway(st); err != nil {
			return err
		}
		// Writable until its children are in; its mode comes last.
		return a.Root.Mkdir(st.Path, 0o700)
	case "put":
		stage := path.Join(StageDir, st.Stage)
		if _, ok := exists(a.Root, stage); !ok {
			return nil // moved into place already
		}
		backup := path.Join(StageDir, st.Backup)
		if fi, ok := exists(a.Root, st.Path); ok {
			if _, ok := exists(a.Root, backup); !ok {
				if fi.IsDir() {
					if err := a.Root.Rename(st.Path, backup); err != nil {
						return err
					}
				} else if err := a.Root.Link(st.Path, backup); err != nil {
					// Keep the original by name instead; the path is
					// missing until the rename below.
					if err := a.Root.Rename(st.Path, backup); err != nil {
						return err
					}
				}
			}
		}
		// Over a file or symlink, rename replaces it in one step.
		return a.Root.Rename(stage, st.Path)
	}
	return fmt.Errorf("unknown step %q", st.Op)
}

package importdir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/branchnfs/branchnfs/cowfs"
	"golang.org/x/sys/unix"
)

// Git directories outside the source.
//
// A linked worktree (git worktree add) or a submodule's checkout has a
// `.git` FILE, "gitdir: PATH", naming a git directory elsewhere: copied
// as it is, it would make every git command in a branch write into the
// host's repository. A `.git` file whose git directory is inside the
// source is imported as it is (a superproject's submodules). At the top
// of the source, one pointing outside is replaced by a self-contained
// `.git` directory: the repository's common directory (objects, refs,
// config; not the other worktrees' records), with the worktree's own
// files (HEAD, index, its logs and refs) over it, and no core.worktree.
// Deeper in the source, one pointing outside fails the import with
// ErrGitOutside. An update (Update) leaves a materialized `.git` as it
// is: from the import on, the branch's git history is its own.

// gitFileMax bounds the `.git` files read to find their git directory.
const gitFileMax = 64 << 10

// perWorktree are the top-level names of a common git directory that
// belong to its main worktree, not to the linked worktree imported.
var perWorktree = map[string]bool{
	"worktrees": true, "HEAD": true, "index": true, "ORIG_HEAD": true, "FETCH_HEAD": true,
	"MERGE_HEAD": true, "MERGE_MSG": true, "MERGE_MODE": true, "CHERRY_PICK_HEAD": true,
	"REVERT_HEAD": true, "REBASE_HEAD": true, "AUTO_MERGE": true, "BISECT_LOG": true,
	"rebase-merge": true, "rebase-apply": true, "sequencer": true, "logs/HEAD": true,
	"config.worktree": true,
}

// outsideGitDir reads `.git` file name of d (stat st, at rel) and returns
// the git directory it names if that lies outside the source, else "".
func (im *importer) outsideGitDir(d *srcDir, rel, name string, st *unix.Stat_t) (string, error) {
	if name != ".git" || fileType(st) != unix.S_IFREG || st.Size > gitFileMax || im.root == "" {
		return "", nil
	}
	f, err := d.open(name, st)
	if err != nil {
		return "", wrap(rel, err)
	}
	b, err := io.ReadAll(&sizedReader{f: f, st: st, left: st.Size})
	f.Close()
	if err != nil {
		return "", wrap(rel, err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	target, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "gitdir:")
	if !ok {
		return "", nil
	}
	target = strings.TrimSpace(target)
	if !filepath.IsAbs(target) {
		target = filepath.Join(im.root, filepath.FromSlash(filepath.Dir(rel)), target)
	}
	resolved, err := filepath.EvalSymlinks(target)
	if err != nil {
		return "", nil // a git directory that is not there: git fails, nothing escapes
	}
	if resolved == im.root || strings.HasPrefix(resolved, im.root+string(filepath.Separator)) {
		return "", nil
	}
	return resolved, nil
}

// gitOutside is the error for a `.git` file below the top of the source
// that names a git directory outside it.
func gitOutside(rel, gitdir, root string) error {
	return fmt.Errorf("importdir: %s names the git directory %s, outside %s, and a branch's git would write into it: %w; import the folder that holds that git directory, or make %s a repository of its own (git clone) before importing",
		rel, gitdir, root, ErrGitOutside, filepath.Dir(filepath.Join(root, rel)))
}

// materializeGit makes directory .git in dst from the git directory
// gitdir (and its common directory), as the package comment says.
func (im *importer) materializeGit(rel string, fileSt *unix.Stat_t, dst cowfs.InodeID, gitdir string) error {
	common := gitdir
	if b, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		c := strings.TrimSpace(string(b))
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitdir, c)
		}
		common = filepath.Clean(c)
	}
	groot, gst, err := openRoot(gitdir)
	if err != nil {
		return wrap(rel, err)
	}
	defer groot.Close()
	na := newAttr(&gst)
	na.UID, na.GID = fileSt.Uid, fileSt.Gid
	a, err := im.fs.Mkdir(dst, ".git", na)
	if err != nil {
		return wrap(rel, err)
	}
	prefix := rel + "/"
	top := func(r string) string { return strings.TrimPrefix(r, prefix) }
	if common != gitdir {
		croot, _, err := openRoot(common)
		if err != nil {
			return wrap(rel, err)
		}
		defer croot.Close()
		im.skip = func(r string) bool { return perWorktree[top(r)] }
		err = im.dir(croot, rel, a.Ino)
		im.skip = nil
		if err != nil {
			return err
		}
	}
	im.skip = func(r string) bool { t := top(r); return t == "commondir" || t == "gitdir" }
	im.merge = true
	err = im.dir(groot, rel, a.Ino)
	im.skip, im.merge = nil, false
	if err != nil {
		return err
	}
	if err := im.dropCoreWorktree(a.Ino, rel); err != nil {
		return err
	}
	if err := im.finishDir(a.Ino, &gst, rel); err != nil {
		return err
	}
	im.p.Dirs++
	im.record(rel, fileSt, [32]byte{})
	im.progress(rel)
	return nil
}

// dropCoreWorktree removes core.worktree from .git/config: a submodule's
// git directory names its checkout there, outside the branch.
func (im *importer) dropCoreWorktree(gitIno cowfs.InodeID, rel string) error {
	a, err := im.fs.Lookup(gitIno, "config")
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil || a.Type != cowfs.TypeRegular || a.Size > 1<<20 {
		return wrap(rel+"/config", err)
	}
	buf := make([]byte, a.Size)
	n, _, err := im.fs.ReadAt(a.Ino, buf, 0)
	if err != nil {
		return wrap(rel+"/config", err)
	}
	lines := strings.SplitAfter(string(buf[:n]), "\n")
	var out strings.Builder
	section, dropped := "", false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			section = strings.ToLower(strings.Trim(strings.Fields(strings.Trim(t, "[]"))[0], "\""))
		}
		k, _, _ := strings.Cut(t, "=")
		if section == "core" && strings.EqualFold(strings.TrimSpace(k), "worktree") {
			dropped = true
			continue
		}
		out.WriteString(l)
	}
	if !dropped {
		return nil
	}
	size := uint64(0)
	if _, err := im.fs.SetAttr(a.Ino, cowfs.SetAttr{Size: &size}); err != nil {
		return wrap(rel+"/config", err)
	}
	if _, err := im.fs.WriteAt(a.Ino, []byte(out.String()), 0); err != nil {
		return wrap(rel+"/config", err)
	}
	return nil
}

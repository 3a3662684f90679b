package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/branchnfs/branchnfs/branches/results"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// errRefExists is an apply --git-branch whose ref exists already (exit
// code exitExists).
var errRefExists = errors.New("ref already exists")

// gitApplyResult is apply --git-branch's --json output.
type gitApplyResult struct {
	Branch string `json:"branch"`
	Repo   string `json:"repo"`
	Ref    string `json:"ref"`
	Commit string `json:"commit"`
	// Parent is the commit the ref's commit sits on: the branch's HEAD,
	// fetched from its .git when the branch made commits of its own.
	Parent string `json:"parent"`
	// Base is the commit HEAD named at the fork.
	Base string `json:"base,omitempty"`
	// Files counts the paths the commit changes over Parent.
	Files int `json:"files"`
	// Ignored lists changed paths left out because the repository's
	// ignore rules ignore them (git add would not add them either).
	Ignored []string `json:"ignored,omitempty"`
}

// gitRunner runs git in one repository with a private index.
type gitRunner struct {
	ctx   context.Context
	repo  string
	index string // GIT_INDEX_FILE, "" for the repository's own
}

func (g *gitRunner) run(stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(g.ctx, "git", args...)
	cmd.Dir = g.repo
	cmd.Env = os.Environ()
	if g.index != "" {
		cmd.Env = append(cmd.Env, "GIT_INDEX_FILE="+g.index)
	}
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("apply --git-branch needs git on PATH: %w", err)
		}
		return out.String(), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (g *gitRunner) line(args ...string) (string, error) {
	out, err := g.run(nil, args...)
	return strings.TrimSpace(out), err
}

// runApplyGit records branch o.Name's changes as a commit on the new ref
// o.GitBranch of the repository o.To, with git's plumbing and a private
// index: the repository's working tree, index and HEAD stay as they are.
func runApplyGit(ctx context.Context, o *applyOptions) error {
	if o.Since != "" || o.DryRun {
		return usagef("--git-branch takes neither --since nor --dry-run")
	}
	repo, err := filepath.Abs(o.To)
	if err != nil {
		return err
	}
	g := &gitRunner{ctx: ctx, repo: repo}
	if _, err := g.line("rev-parse", "--absolute-git-dir"); err != nil {
		return fmt.Errorf("apply --git-branch: %s is not a git repository: %w", repo, err)
	}
	ref := o.GitBranch
	if !strings.HasPrefix(ref, "refs/") {
		ref = "refs/heads/" + ref
	}
	if _, err := g.line("check-ref-format", ref); err != nil {
		return usagef("--git-branch %q is not a valid ref name", o.GitBranch)
	}
	if _, err := g.line("rev-parse", "--verify", "--quiet", ref); err == nil {
		return fmt.Errorf("%w: %s exists in %s: pick a new name, or delete it first (git update-ref -d %s)", errRefExists, ref, repo, ref)
	}
	tmp, err := os.MkdirTemp("", "branchnfs-git-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	return withBackend(ctx, o.globalOptions, func(b *backend) error {
		out, err := outputsOf(b)
		if err != nil {
			return err
		}
		res := gitApplyResult{Branch: o.Name, Repo: repo, Ref: ref}
		d, err := b.Diff(ctx, o.Name)
		if err != nil {
			return err
		}
		// The branch's own repository, whose HEAD the commit goes on.
		branchGit, err := os.OpenRoot(mkdirIn(tmp, "branch"))
		if err != nil {
			return err
		}
		defer branchGit.Close()
		_, err = exportInto(ctx, out, o.Name, "", ".git", branchGit)
		gitDir := filepath.Join(tmp, "branch", ".git")
		if err == nil {
			_, err = os.Stat(filepath.Join(gitDir, "HEAD"))
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("apply --git-branch: branch %s has no git repository at its top (.git/HEAD): use apply --to DIR to write its files instead", o.Name)
		}
		if err != nil {
			return fmt.Errorf("apply --git-branch: copying the branch's .git: %w", err)
		}
		// Fetch the branch's HEAD (its commits, if it made any) into
		// the repository; FETCH_HEAD is all it writes besides objects.
		if _, err := g.line("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", gitDir, "HEAD"); err != nil {
			return fmt.Errorf("apply --git-branch: fetching the branch's commits: %w", err)
		}
		if res.Parent, err = (&gitRunner{ctx: ctx, repo: gitDir}).line("rev-parse", "--verify", "HEAD^{commit}"); err != nil {
			return fmt.Errorf("apply --git-branch: the branch's HEAD: %w", err)
		}
		if _, err := g.line("cat-file", "-e", res.Parent+"^{commit}"); err != nil {
			return fmt.Errorf("apply --git-branch: the branch's HEAD %s did not arrive in %s: %w", res.Parent, repo, err)
		}
		res.Base = res.Parent
		if d.Git != nil && d.Git.HeadBefore != "" {
			res.Base = d.Git.HeadBefore
		}
		g.index = filepath.Join(tmp, "index")
		if _, err := g.line("read-tree", res.Parent); err != nil {
			return err
		}
		if err := stageBranchChanges(ctx, g, out, o.Name, tmp, &res); err != nil {
			return err
		}
		tree, err := g.line("write-tree")
		if err != nil {
			return err
		}
		parentTree, err := g.line("rev-parse", res.Parent+"^{tree}")
		if err != nil {
			return err
		}
		res.Commit = res.Parent
		if tree != parentTree {
			msg := fmt.Sprintf("Changes of branchnfs branch %s\n\nThe working tree of branch %s, over its HEAD.\n", o.Name, o.Name)
			if res.Commit, err = g.line("commit-tree", tree, "-p", res.Parent, "-m", msg); err != nil {
				return err
			}
			files, err := g.line("diff-tree", "--no-commit-id", "--name-only", "-r", "-z", res.Commit)
			if err != nil {
				return err
			}
			res.Files = len(strings.Split(strings.Trim(files, "\x00"), "\x00"))
		}
		// The empty old value makes the update fail if the ref appeared
		// meanwhile.
		if _, err := g.line("update-ref", "-m", "branchnfs apply "+o.Name, ref, res.Commit, ""); err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.stdout, res)
		}
		fmt.Fprintf(o.stdout, "%s in %s is now %.12s: %d file(s) changed over %.12s", ref, repo, res.Commit, res.Files, res.Parent)
		if res.Parent != res.Base {
			fmt.Fprintf(o.stdout, " (the branch's commits since %.12s)", res.Base)
		}
		fmt.Fprintln(o.stdout)
		if len(res.Ignored) > 0 {
			fmt.Fprintf(o.stdout, "left out %d path(s) the repository ignores\n", len(res.Ignored))
		}
		fmt.Fprintf(o.stdout, "review: git show --stat %s\n", ref)
		return nil
	})
}

func mkdirIn(dir, name string) string {
	p := filepath.Join(dir, name)
	os.Mkdir(p, 0o700)
	return p
}

// stageBranchChanges writes the branch's changed files and symlinks (but
// those under .git and those the repository ignores) as blobs and into
// g's index.
func stageBranchChanges(ctx context.Context, g *gitRunner, out control.Outputs, name, tmp string, res *gitApplyResult) error {
	blobs := mkdirIn(tmp, "blobs")
	type entry struct {
		path, mode, file string
	}
	var adds []entry
	var removes []string
	n := 0
	err := streamChangeSet(ctx, out, name, "", true, func(d results.Delta, content io.Reader) error {
		if results.InGit(d.Path) {
			return nil
		}
		oldTracked := d.Old != nil && (d.Old.Type == results.TypeFile || d.Old.Type == results.TypeSymlink)
		newTracked := d.New != nil && (d.New.Type == results.TypeFile || d.New.Type == results.TypeSymlink)
		if !newTracked {
			if oldTracked {
				removes = append(removes, d.Path)
			}
			return nil
		}
		n++
		file := filepath.Join(blobs, fmt.Sprint(n))
		var data io.Reader = strings.NewReader(d.New.Target)
		mode := "120000"
		if d.New.Type == results.TypeFile {
			data, mode = content, "100644"
			if d.New.Mode&0o100 != 0 {
				mode = "100755"
			}
			if content == nil {
				return fmt.Errorf("apply --git-branch: no content for %s in the change set", results.QuotePath(d.Path))
			}
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		adds = append(adds, entry{d.Path, mode, file})
		return err
	})
	if err != nil {
		return err
	}
	// Leave out what git add would: paths the repository ignores and
	// the index (the HEAD's tree) does not track.
	if len(adds) > 0 {
		var paths bytes.Buffer
		for _, a := range adds {
			paths.WriteString(a.path + "\x00")
		}
		ignored, err := g.run(&paths, "check-ignore", "-z", "--stdin")
		if err != nil && ignored == "" && !strings.Contains(err.Error(), "exit status 1") {
			return err
		}
		skip := map[string]bool{}
		for _, p := range strings.Split(strings.Trim(ignored, "\x00"), "\x00") {
			if p != "" {
				skip[p] = true
				res.Ignored = append(res.Ignored, p)
			}
		}
		kept := adds[:0]
		for _, a := range adds {
			if !skip[a.path] {
				kept = append(kept, a)
			}
		}
		adds = kept
	}
	var files bytes.Buffer
	for _, a := range adds {
		files.WriteString(a.file + "\n")
	}
	ids, err := g.run(&files, "hash-object", "-w", "--no-filters", "--stdin-paths")
	if err != nil {
		return err
	}
	idList := strings.Fields(ids)
	if len(idList) != len(adds) {
		return fmt.Errorf("apply --git-branch: git hash-object gave %d ids for %d files", len(idList), len(adds))
	}
	var info bytes.Buffer
	for _, p := range removes {
		fmt.Fprintf(&info, "0 0000000000000000000000000000000000000000\t%s\x00", p)
	}
	for i, a := range adds {
		fmt.Fprintf(&info, "%s %s\t%s\x00", a.mode, idList[i], a.path)
	}
	_, err = g.run(&info, "update-index", "-z", "--index-info")
	return err
}

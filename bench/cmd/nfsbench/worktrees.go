package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/branchnfs/branchnfs/bench/stats"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// The worktrees section: workspaces for N agents on one git repository
// whose checkout holds a node_modules-sized tree of small ignored files,
// made the way agent tools make them today (git worktree add, then a copy
// of the ignored state, since a new worktree has none of it) and as forks
// of a branch imported once. Per workspace it measures the time to a
// usable workspace and the disk it takes. One mount of the export "/"
// reaches every branch, forked before or after it (README), so a fork
// needs no mount of its own; the one-time import and mount are listed
// apart.

type worktreeResult struct {
	Workspaces   int    `json:"workspaces"`
	TrackedFiles int    `json:"tracked_files"`
	IgnoredFiles int    `json:"ignored_files"`
	CheckoutDisk int64  `json:"checkout_disk_bytes"` // the user's checkout, .git included
	FSType       string `json:"fs_type"`             // of the temporary directory
	// Per workspace: git worktree add, then cp -a of what git ignores.
	WorktreeAdd  stats.Summary `json:"worktree_add_ms"`
	CopyIgnored  stats.Summary `json:"copy_ignored_ms"`
	WorktreeTime stats.Summary `json:"worktree_total_ms"`
	WorktreeDisk int64         `json:"worktree_disk_bytes"` // mean per workspace, as du counts it
	// Per workspace: a fork through the control API.
	Fork       stats.Summary `json:"fork_us"`
	ForkDisk   int64         `json:"fork_disk_bytes"` // the store's growth over the forks, per fork
	ImportS    float64       `json:"import_seconds"`  // once: init --from the checkout
	StoreBytes int64         `json:"store_bytes"`     // after the import
	// Ratios per workspace (median times; disk with a floor of one 4 KiB
	// block per fork when the store did not grow).
	SpeedRatio float64 `json:"speed_ratio"`
	DiskRatio  float64 `json:"disk_ratio"`
}

// worktreeFiles is the size of the ignored tree (node_modules and a build
// directory); --quick uses a tenth.
const worktreeFiles = 30000

func (s *suite) worktrees(ctx context.Context) {
	if _, err := exec.LookPath("git"); err != nil {
		s.fail("worktrees", fmt.Errorf("git is not installed (apt-get install git)"))
		return
	}
	if s.bnfs == "" {
		s.fail("worktrees", fmt.Errorf("needs --branchnfs"))
		return
	}
	r, err := s.worktreesRun(ctx)
	if err != nil {
		s.fail("worktrees", err)
		return
	}
	s.res.Worktrees = r
}

func (s *suite) worktreesRun(ctx context.Context) (*worktreeResult, error) {
	n := max(1, s.cfg.Workspaces)
	ignored := worktreeFiles
	if s.cfg.Quick {
		ignored /= 10
	}
	root := filepath.Join(s.tmp, "worktrees")
	repo := filepath.Join(root, "repo")
	defer os.RemoveAll(root)
	tracked, err := makeRepo(repo, ignored)
	if err != nil {
		return nil, err
	}
	r := &worktreeResult{Workspaces: n, TrackedFiles: tracked, IgnoredFiles: ignored, FSType: fsType(root)}
	if r.CheckoutDisk, err = duBytes(repo); err != nil {
		return nil, err
	}
	s.logf("worktrees: repository of %d tracked and %d ignored files, %.1f MiB on %s", tracked, ignored, mib(r.CheckoutDisk), r.FSType)

	// git worktree add + a copy of the ignored state, as agent tools do.
	ign, err := gitOut(repo, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	if err != nil {
		return nil, err
	}
	var adds, copies, totals []time.Duration
	var disk int64
	for i := 1; i <= n; i++ {
		wt := filepath.Join(root, fmt.Sprintf("wt%d", i))
		t0 := time.Now()
		if _, err := gitOut(repo, "worktree", "add", "-q", "-b", fmt.Sprintf("agent%d", i), wt); err != nil {
			return nil, err
		}
		t1 := time.Now()
		for _, p := range strings.Split(strings.TrimRight(ign, "\x00"), "\x00") {
			p = strings.TrimSuffix(p, "/")
			if p == "" {
				continue
			}
			dst := filepath.Join(wt, filepath.Dir(p))
			if out, err := exec.Command("cp", "-a", filepath.Join(repo, p), dst+"/").CombinedOutput(); err != nil {
				return nil, fmt.Errorf("cp -a %s: %v: %s", p, err, out)
			}
		}
		t2 := time.Now()
		adds, copies, totals = append(adds, t1.Sub(t0)), append(copies, t2.Sub(t1)), append(totals, t2.Sub(t0))
		d, err := duBytes(wt)
		if err != nil {
			return nil, err
		}
		disk += d
	}
	ms := func(ds []time.Duration) stats.Summary {
		return stats.Summarize(func() []float64 {
			out := make([]float64, len(ds))
			for i, d := range ds {
				out[i] = d.Seconds() * 1e3
			}
			return out
		}())
	}
	r.WorktreeAdd, r.CopyIgnored, r.WorktreeTime = ms(adds), ms(copies), ms(totals)
	r.WorktreeDisk = disk / int64(n)
	// The worktrees' records in the repository's .git count too.
	s.logf("worktrees: git worktree add + copy: p50 %.0f ms, %.1f MiB each", r.WorktreeTime.Median, mib(r.WorktreeDisk))

	// branchnfs: import once, then fork.
	store := filepath.Join(root, "store")
	t0 := time.Now()
	if _, err := branchnfsCLI(s.bnfs, "init", "--store", store, "--from", repo); err != nil {
		return nil, err
	}
	r.ImportS = time.Since(t0).Seconds()
	srv, err := startBranchnfs(s.bnfs, store, filepath.Join(s.tmp, "branchnfs-worktrees.log"))
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	c, _, err := control.Dial(ctx, control.SocketPath(store), 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	before, err := duBytes(store)
	if err != nil {
		return nil, err
	}
	r.StoreBytes = before
	var forks []time.Duration
	for i := 1; i <= n; i++ {
		t := time.Now()
		if _, err := c.Fork(ctx, "main", fmt.Sprintf("agent%d", i)); err != nil {
			return nil, err
		}
		forks = append(forks, time.Since(t))
	}
	after, err := duBytes(store)
	if err != nil {
		return nil, err
	}
	r.Fork = stats.Summarize(stats.Micros(forks))
	r.ForkDisk = max(0, after-before) / int64(n)
	r.SpeedRatio = r.WorktreeTime.Median * 1e3 / r.Fork.Median
	r.DiskRatio = float64(r.WorktreeDisk) / float64(max(r.ForkDisk, 4096))
	s.logf("worktrees: fork p50 %.0f µs, store grew %d bytes per fork; %.0f× faster, %.0f× less disk", r.Fork.Median, r.ForkDisk, r.SpeedRatio, r.DiskRatio)
	return r, nil
}

// makeRepo makes a git repository in dir with tracked sources and, ignored
// by .gitignore, a node_modules tree of small files (most of them), a
// build directory and a .env, as a JavaScript project's checkout has. It
// returns the number of tracked files.
func makeRepo(dir string, ignored int) (int, error) {
	rng := rand.New(rand.NewSource(35))
	write := func(p string, size int) error {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		const alphabet = "abcdefghijklmnopqrstuvwxyz\n  (){};=.,"
		b := make([]byte, size)
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return os.WriteFile(p, b, 0o644)
	}
	tracked := 0
	for i := 0; i < 2000; i++ {
		if err := write(filepath.Join(dir, "src", fmt.Sprintf("m%02d", i%40), fmt.Sprintf("f%04d.ts", i)), 200+rng.Intn(4000)); err != nil {
			return 0, err
		}
		tracked++
	}
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("node_modules/\ndist/\n.env\n"), 0o644); err != nil {
		return 0, err
	}
	tracked++
	build := ignored / 20
	for i := 0; i < ignored-build; i++ {
		p := filepath.Join(dir, "node_modules", fmt.Sprintf("pkg%03d", i/100), "lib", fmt.Sprintf("m%d.js", i%100))
		if err := write(p, 100+rng.Intn(3000)); err != nil {
			return 0, err
		}
	}
	for i := 0; i < build; i++ {
		if err := write(filepath.Join(dir, "dist", fmt.Sprintf("chunk%04d.js", i)), 1000+rng.Intn(8000)); err != nil {
			return 0, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("API_TOKEN=local\n"), 0o600); err != nil {
		return 0, err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "import"}} {
		if _, err := gitOut(dir, args...); err != nil {
			return 0, err
		}
	}
	return tracked, nil
}

func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// duBytes is the disk space of the tree at dir as du counts it: allocated
// blocks of every entry, directories included, hard links once.
func duBytes(dir string) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		k := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if seen[k] {
			return nil
		}
		seen[k] = true
		total += int64(st.Blocks) * 512
		return nil
	})
	return total, err
}

// fsType names the filesystem holding dir, as df -T does.
func fsType(dir string) string {
	out, err := exec.Command("df", "--output=fstype", dir).Output()
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(out))
	return f[len(f)-1]
}

func renderWorktrees(w *worktreeResult, p func(string, ...any), missed *[]string) {
	p("## 10. Workspaces for agents: git worktree + ignored state vs. fork (N = %d)\n\n", w.Workspaces)
	p("A git repository of %d tracked files whose checkout also holds %d ignored files (node_modules, dist, .env), %.1f MiB on disk (%s). Per workspace:\n\n",
		w.TrackedFiles, w.IgnoredFiles, mib(w.CheckoutDisk), w.FSType)
	p("| workspace | time, median (min–max) | disk per workspace |\n|---|---|---|\n")
	p("| `git worktree add` | %.0f ms (%.0f–%.0f) | |\n", w.WorktreeAdd.Median, w.WorktreeAdd.Min, w.WorktreeAdd.Max)
	p("| + `cp -a` of the ignored files | %.0f ms (%.0f–%.0f) | |\n", w.CopyIgnored.Median, w.CopyIgnored.Min, w.CopyIgnored.Max)
	p("| worktree, total | %.0f ms (%.0f–%.0f) | %.1f MiB |\n", w.WorktreeTime.Median, w.WorktreeTime.Min, w.WorktreeTime.Max, mib(w.WorktreeDisk))
	p("| `fork` (control API) | %.0f µs (%.0f–%.0f) | %d bytes |\n", w.Fork.Median, w.Fork.Min, w.Fork.Max, w.ForkDisk)
	okT, okD := w.SpeedRatio >= 100, w.DiskRatio >= 100
	p("\nFork: %.0f× faster (target ≥ 100×): %s; %.0f× less disk (target ≥ 100×, a fork counted as at least one 4 KiB block): %s. Once for all workspaces: `init --from` the checkout took %.1f s and the store holds %.1f MiB; one mount of the export `/` serves every branch.\n\n",
		w.SpeedRatio, verdict(okT), w.DiskRatio, verdict(okD), w.ImportS, mib(w.StoreBytes))
	if !okT {
		*missed = append(*missed, fmt.Sprintf("worktrees: fork only %.0f× faster than a worktree with its ignored state (target ≥ 100×)", w.SpeedRatio))
	}
	if !okD {
		*missed = append(*missed, fmt.Sprintf("worktrees: fork only %.0f× less disk than a worktree with its ignored state (target ≥ 100×)", w.DiskRatio))
	}
}

package results_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches/results"
)

// changeSet expands base → head and round-trips the deltas through a
// change set, as apply receives them.
func changeSet(t *testing.T, base, head string) (deltas []results.Delta, stream func(fn func(d results.Delta, r io.Reader) error) error) {
	t.Helper()
	ds, err := results.Expand(results.Dir(base), results.Dir(head), allPaths(t, base, head), results.ExpandOptions{Hash: true})
	if err != nil {
		t.Fatal(err)
	}
	var meta, full bytes.Buffer
	if err := results.WriteChangeSet(&meta, results.Dir(head), ds, false); err != nil {
		t.Fatal(err)
	}
	if err := results.WriteChangeSet(&full, results.Dir(head), ds, true); err != nil {
		t.Fatal(err)
	}
	err = results.ReadChangeSet(&meta, func(d results.Delta, _ io.Reader) error {
		deltas = append(deltas, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return deltas, func(fn func(d results.Delta, r io.Reader) error) error {
		return results.ReadChangeSet(bytes.NewReader(full.Bytes()), fn)
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if b, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, b)
	}
	return dst
}

// TestApplyTypeChanges: apply turns a copy of the base into the head for
// every kind of change, type changes included (a directory that becomes
// a file, a file that becomes a directory or a symlink), with modes.
func TestApplyTypeChanges(t *testing.T) {
	base, head := buildTrees(t)
	// A file that becomes a directory, a directory that becomes a file.
	os.WriteFile(filepath.Join(base, "f2d"), []byte("file\n"), 0o644)
	os.MkdirAll(filepath.Join(head, "f2d", "in"), 0o755)
	os.WriteFile(filepath.Join(head, "f2d", "in", "x"), []byte("x\n"), 0o600)
	os.MkdirAll(filepath.Join(base, "d2f", "in"), 0o755)
	os.WriteFile(filepath.Join(base, "d2f", "in", "x"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(head, "d2f"), []byte("now a file\n"), 0o640)
	os.WriteFile(filepath.Join(head, "setuid"), []byte("s\n"), 0o644)
	os.Chmod(filepath.Join(head, "setuid"), 0o4755)
	deltas, stream := changeSet(t, base, head)
	dir := copyDir(t, base)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	plan, err := results.PlanApply(root, deltas, results.PlanOptions{})
	if err != nil || len(plan.Conflicts) > 0 {
		t.Fatalf("plan: %v %+v", err, plan.Conflicts)
	}
	a := &results.Applier{Root: root, Branch: "b"}
	if err := a.Run(plan, stream); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, ".git"))
	os.RemoveAll(filepath.Join(head, ".git"))
	if d := compareTrees(t, head, dir, true); d != "" {
		t.Fatal(d)
	}
	if _, err := os.Stat(filepath.Join(dir, results.StageDir)); !os.IsNotExist(err) {
		t.Fatalf("staging directory left behind: %v", err)
	}
}

// TestApplyStopsOnChangedBranch: content that does not match the plan's
// hashes (the branch changed between the two reads) stops the apply
// before anything moves, and leaves no staging behind.
func TestApplyStopsOnChangedBranch(t *testing.T) {
	base, head := buildTrees(t)
	deltas, _ := changeSet(t, base, head)
	os.WriteFile(filepath.Join(head, "added.txt"), []byte("changed meanwhile\n"), 0o644)
	_, stream := changeSet(t, base, head)
	dir := copyDir(t, base)
	before := compareTrees(t, base, dir, true)
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	plan, err := results.PlanApply(root, deltas, results.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = (&results.Applier{Root: root}).Run(plan, stream)
	if err == nil || !strings.Contains(err.Error(), "changed in the branch") {
		t.Fatalf("apply of a changed branch: %v", err)
	}
	if d := compareTrees(t, base, dir, true); d != before {
		t.Fatalf("the folder changed:\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(dir, results.StageDir)); !os.IsNotExist(err) {
		t.Fatalf("staging directory left behind: %v", err)
	}
	// Recover finds nothing to do.
	if r, err := (&results.Applier{Root: root}).Recover(); r != nil || err != nil {
		t.Fatalf("recover: %+v %v", r, err)
	}
}

// TestPatchRandomEdits: random line edits of random files, as a patch,
// apply with git apply (seeds logged).
func TestPatchRandomEdits(t *testing.T) {
	needGit(t)
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			root := t.TempDir()
			base, head := filepath.Join(root, "base"), filepath.Join(root, "head")
			os.Mkdir(base, 0o755)
			os.Mkdir(head, 0o755)
			for f := range 5 {
				var lines []string
				for range rng.IntN(300) {
					lines = append(lines, fmt.Sprintf("line %d", rng.IntN(40)))
				}
				old := strings.Join(lines, "\n")
				if rng.IntN(2) == 0 && old != "" {
					old += "\n"
				}
				for range rng.IntN(20) {
					i := 0
					if len(lines) > 0 {
						i = rng.IntN(len(lines))
					}
					switch rng.IntN(3) {
					case 0:
						lines = append(lines[:i], append([]string{fmt.Sprintf("new %d", rng.IntN(5))}, lines[i:]...)...)
					case 1:
						if len(lines) > 0 {
							lines = append(lines[:i], lines[i+1:]...)
						}
					case 2:
						if len(lines) > 0 {
							lines[i] = "replaced"
						}
					}
				}
				neu := strings.Join(lines, "\n")
				if rng.IntN(2) == 0 && neu != "" {
					neu += "\n"
				}
				name := fmt.Sprintf("f%d", f)
				os.WriteFile(filepath.Join(base, name), []byte(old), 0o644)
				os.WriteFile(filepath.Join(head, name), []byte(neu), 0o644)
			}
			deltas, err := results.Expand(results.Dir(base), results.Dir(head), allPaths(t, base, head), results.ExpandOptions{Hash: true})
			if err != nil {
				t.Fatal(err)
			}
			var patch bytes.Buffer
			if _, err := results.WritePatch(&patch, results.Dir(base), results.Dir(head), deltas, results.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			git(t, base, patch.Bytes(), "apply", "-")
			if d := compareTrees(t, head, base, false); d != "" {
				t.Fatalf("seed %d:\n%s\n%s", seed, d, patch.String())
			}
		})
	}
}

// runCut runs fn on a goroutine of its own, which fn may end with
// runtime.Goexit as a kill -9 would end the process: nothing after the
// cut runs.
func runCut(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// TestApplyRecover: an apply cut while staging is undone by Recover,
// the folder as before; one cut while moving content into place is
// completed, the folder as the head.
func TestApplyRecover(t *testing.T) {
	base, head := buildTrees(t)
	deltas, stream := changeSet(t, base, head)
	for _, tc := range []struct {
		name string
		cut  func(a *results.Applier) func(fn func(d results.Delta, r io.Reader) error) error
		want string
	}{
		{"staging", func(a *results.Applier) func(fn func(d results.Delta, r io.Reader) error) error {
			return func(fn func(d results.Delta, r io.Reader) error) error {
				n := 0
				return stream(func(d results.Delta, r io.Reader) error {
					if n++; n == 4 {
						runtime.Goexit()
					}
					return fn(d, r)
				})
			}
		}, "undone"},
		{"committing", func(a *results.Applier) func(fn func(d results.Delta, r io.Reader) error) error {
			a.AfterStep = func(done int) {
				if done == 5 {
					runtime.Goexit()
				}
			}
			return stream
		}, "completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, base)
			root, _ := os.OpenRoot(dir)
			defer root.Close()
			plan, err := results.PlanApply(root, deltas, results.PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			a := &results.Applier{Root: root, Branch: "b"}
			s := tc.cut(a)
			runCut(func() { a.Run(plan, s) })
			if _, err := os.Stat(filepath.Join(dir, results.StageDir)); err != nil {
				t.Fatalf("no staging left by the cut: %v", err)
			}
			r, err := (&results.Applier{Root: root}).Recover()
			if err != nil || r == nil || r.Action != tc.want || r.Branch != "b" {
				t.Fatalf("recover: %+v %v", r, err)
			}
			want := base
			if tc.want == "completed" {
				want = head
			}
			// .git is not applied: it stays the base's.
			if d := compareTrees(t, want, dir, true); d != "" && !onlyGit(d) {
				t.Fatal(d)
			}
		})
	}
}

func onlyGit(d string) bool {
	for _, l := range strings.Split(d, "\n") {
		if !strings.HasPrefix(l, ".git") {
			return false
		}
	}
	return true
}

// TestChangeSetNames: a change set carries any name exactly, newlines
// and bytes that are not UTF-8 included.
func TestChangeSetNames(t *testing.T) {
	root := t.TempDir()
	base, head := filepath.Join(root, "base"), filepath.Join(root, "head")
	os.Mkdir(base, 0o755)
	os.Mkdir(head, 0o755)
	names := []string{"new\nline", "caf\xe9", strings.Repeat("long", 60), `back\slash`}
	for _, n := range names {
		os.WriteFile(filepath.Join(head, n), []byte(n), 0o644)
	}
	deltas, stream := changeSet(t, base, head)
	if len(deltas) != len(names) {
		t.Fatalf("deltas: %+v", deltas)
	}
	got := map[string]string{}
	stream(func(d results.Delta, r io.Reader) error {
		b, _ := io.ReadAll(r)
		got[d.Path] = string(b)
		return nil
	})
	for _, n := range names {
		if got[n] != n {
			t.Errorf("%q: got content %q", n, got[n])
		}
	}
}

package branches_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

func diffPaths(t *testing.T, m *branches.Manager, b string) []string {
	t.Helper()
	var out []string
	for _, c := range must(m.Diff(context.Background(), b))(t).Changes {
		out = append(out, c.Path)
	}
	return out
}

// The ignore list is set per store, kept in it across opens, and applied
// to diffs and conflicts.
func TestIgnoreListPerStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func(ignore []string) (*branches.Manager, error) {
		st, err := kv.OpenBadger(dir, kv.BadgerOptions{GCInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		m, err := branches.Open(ctx, branches.Options{Store: st, ReclaimDelay: -1, Ignore: ignore})
		if err != nil {
			st.Close()
			return nil, err
		}
		return m, nil
	}
	closeM := func(m *branches.Manager) {
		m.Close()
		m.Store().Close()
	}

	m := must(open(nil))(t)
	if got := m.Ignore(); !reflect.DeepEqual(got, branches.DefaultIgnore) {
		t.Fatalf("new store ignores %q, want the defaults %q", got, branches.DefaultIgnore)
	}
	closeM(m)

	m = must(open([]string{"*.log"}))(t)
	write(t, m, "main", "keep", "k")
	must(m.Fork(ctx, "main", "c"))(t)
	write(t, m, "c", "build.log", "noise")
	write(t, m, "c", "._meta", "now listed")
	if got := diffPaths(t, m, "c"); !reflect.DeepEqual(got, []string{"._meta"}) {
		t.Errorf("diff with [*.log] = %q, want [._meta]", got)
	}
	// Both sides write build.log: ignored names never conflict.
	write(t, m, "main", "build.log", "parent noise")
	if _, err := m.Commit(ctx, "c"); err != nil {
		t.Fatalf("commit with an ignored name changed on both sides: %v", err)
	}
	closeM(m)

	m = must(open(nil))(t) // a later open without a list keeps the store's
	if got := m.Ignore(); !reflect.DeepEqual(got, []string{"*.log"}) {
		t.Errorf("reopened store ignores %q, want [*.log]", got)
	}
	closeM(m)

	m = must(open([]string{}))(t) // an empty list ignores nothing
	must(m.Fork(ctx, "main", "d"))(t)
	write(t, m, "d", "x.log", "1")
	write(t, m, "d", ".DS_Store", "2")
	if got := diffPaths(t, m, "d"); !reflect.DeepEqual(got, []string{".DS_Store", "x.log"}) {
		t.Errorf("diff with no ignores = %q", got)
	}
	closeM(m)

	for _, bad := range [][]string{{"a//b"}, {"["}, {"src/[/x"}, {""}, {"/"}, {"a/../b"}} {
		if _, err := open(bad); !errors.Is(err, branches.ErrInvalidPattern) {
			t.Errorf("open with %q: %v, want ErrInvalidPattern", bad, err)
		}
	}
	m = must(open(nil))(t)
	defer closeM(m)
	if got := m.Ignore(); len(got) != 0 {
		t.Errorf("after refused lists the store ignores %q, want the empty list", got)
	}
}

func TestIgnorePatterns(t *testing.T) {
	cases := []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{"*.log", []string{"a.log", "x/y/b.log"}, []string{"a.log/x", "alog"}},
		{"node_modules/", []string{"node_modules", "node_modules/dep/index.js", "pkg/node_modules/x"}, []string{"node_modules2/x", "src/node_module"}},
		{"build/**", []string{"build/a", "build/x/y/z.o"}, []string{"build", "src/build/a", "builder/a"}},
		{"/dist", []string{"dist", "dist/app.js"}, []string{"src/dist", "distx"}},
		{"src/**/*.gen.go", []string{"src/a.gen.go", "src/x/y/b.gen.go"}, []string{"a.gen.go", "src/a.go", "lib/src/a.gen.go"}},
		{"docs/*.tmp/", []string{"docs/a.tmp", "docs/a.tmp/x"}, []string{"docs/x/a.tmp"}},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			for _, p := range c.yes {
				if ok, err := branches.IgnoreMatch([]string{c.pattern}, p); err != nil || !ok {
					t.Errorf("%q does not ignore %q (%v)", c.pattern, p, err)
				}
			}
			for _, p := range c.no {
				if ok, err := branches.IgnoreMatch([]string{c.pattern}, p); err != nil || ok {
					t.Errorf("%q ignores %q (%v)", c.pattern, p, err)
				}
			}
		})
	}
}

// Path patterns keep whole trees out of diffs and conflicts.
func TestIgnorePathPatterns(t *testing.T) {
	ctx := context.Background()
	m := newManagerOpts(t, branches.Options{Ignore: []string{"node_modules/", "build/**"}})
	write(t, m, "main", "src/a.go", "a")
	write(t, m, "main", "node_modules/dep/index.js", "1")
	write(t, m, "main", "build/out.o", "o")
	must(m.Fork(ctx, "main", "c"))(t)
	write(t, m, "c", "src/a.go", "changed")
	write(t, m, "c", "node_modules/dep/index.js", "2")
	write(t, m, "c", "node_modules/new/x.js", "new")
	write(t, m, "c", "build/out.o", "o2")
	write(t, m, "c", "build/sub/more.o", "more")
	write(t, m, "c", "src/build/kept.txt", "not under the root's build")
	if got, want := diffPaths(t, m, "c"), []string{"src/a.go", "src/build", "src/build/kept.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("diff = %q, want %q", got, want)
	}
	// Both sides change the same ignored files: no conflict, the child wins.
	write(t, m, "main", "node_modules/dep/index.js", "parent")
	write(t, m, "main", "build/out.o", "parent")
	if _, err := m.Commit(ctx, "c"); err != nil {
		t.Fatalf("commit with ignored paths changed on both sides: %v", err)
	}
	if got := read(t, m, "main", "node_modules/dep/index.js"); got != "2" {
		t.Errorf("main's node_modules/dep/index.js = %q, want the child's", got)
	}
}

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

	for _, bad := range [][]string{{"a/b"}, {"["}, {""}} {
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

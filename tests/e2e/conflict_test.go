package e2e

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// A path changed both in a branch and in its parent refuses the commit,
// naming the path, in the CLI and in the API; other changes merge, and
// macOS metadata names never conflict.
func TestCommitConflictAndMerge(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	mainT, _ := c.mount(t, "/main")
	writeFile(t, mainT, "/shared.txt", []byte("base"))
	mustCLI(t, store, "fork", "main", "x")
	x, _ := c.mount(t, "/x")

	writeFile(t, mainT, "/shared.txt", []byte("main's edit"))
	writeFile(t, x, "/shared.txt", []byte("x's edit"))
	writeFile(t, mainT, "/only-main.txt", []byte("m"))
	writeFile(t, x, "/only-x.txt", []byte("x"))
	writeFile(t, mainT, "/.DS_Store", []byte("finder main"))
	writeFile(t, x, "/.DS_Store", []byte("finder x"))

	code, _, stderr := cli(t, store, "commit", "x", "--force")
	if code != 7 || !strings.Contains(stderr, "shared.txt") || strings.Contains(stderr, ".DS_Store") {
		t.Fatalf("conflicting commit: exit %d %q", code, stderr)
	}
	cl, _, err := control.Dial(context.Background(), control.SocketPath(store), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ce *branches.ConflictError
	if _, err := cl.ForceCommit(context.Background(), "x"); !errors.As(err, &ce) || !reflect.DeepEqual(ce.Paths, []string{"shared.txt"}) {
		t.Fatalf("API conflicting commit: %v", err)
	}
	// Nothing was applied.
	if got := mustRead(t, mainT, "/shared.txt"); string(got) != "main's edit" {
		t.Fatalf("main/shared.txt after refused commit = %q", got)
	}
	if _, err := readFile(mainT, "/only-x.txt"); err == nil {
		t.Fatal("refused commit applied only-x.txt")
	}

	// Changes on different paths merge into a changed parent.
	mustCLI(t, store, "abort", "x", "--force")
	mustCLI(t, store, "fork", "main", "y")
	y, _ := c.mount(t, "/y")
	writeFile(t, y, "/only-y.txt", []byte("y"))
	writeFile(t, mainT, "/main-later.txt", []byte("later"))
	out := mustCLI(t, store, "commit", "y", "--force")
	if !strings.Contains(out, "merged") {
		t.Fatalf("commit into a changed parent should merge: %q", out)
	}
	for p, want := range map[string]string{"/only-y.txt": "y", "/main-later.txt": "later", "/only-main.txt": "m"} {
		if got := mustRead(t, mainT, p); string(got) != want {
			t.Fatalf("main%s = %q, want %q", p, got, want)
		}
	}
}

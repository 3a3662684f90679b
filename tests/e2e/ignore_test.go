package e2e

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// serve --ignore sets the store's ignore list: status shows it, diff
// leaves matching names out, and a commit never publishes a file the
// client silly-renamed (Linux's format here, macOS's in macos_test.go).
func TestServeIgnoreAndSillyRenames(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0, "--ignore", "*.log", "--ignore", ".nfs.*")
	cl, st, err := control.Dial(context.Background(), control.SocketPath(store), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if want := []string{"*.log", ".nfs.*"}; !reflect.DeepEqual(st.Ignore, want) {
		t.Fatalf("status ignore = %q, want %q", st.Ignore, want)
	}
	mustCLI(t, store, "fork", "main", "b")
	c := dial(t, srv.port)
	b, _ := c.mount(t, "/b")
	writeFile(t, b, "/build.log", []byte("noise"))
	writeFile(t, b, "/._meta", []byte("listed now"))
	writeFile(t, b, "/open.txt", []byte("removed while open"))
	const silly = ".nfs00000000000f424000000001"
	if err := b.Rename("/open.txt", "/"+silly); err != nil {
		t.Fatalf("silly rename: %v", err)
	}
	var d branches.Diff
	if err := json.Unmarshal([]byte(mustCLI(t, store, "diff", "b", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Changes) != 1 || d.Changes[0].Path != "._meta" {
		t.Fatalf("diff = %+v, want only ._meta", d.Changes)
	}
	mustCLI(t, store, "commit", "b", "--force")
	m, _ := c.mount(t, "/main")
	ents, err := m.ReadDirPlus("/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.FileName != "." && e.FileName != ".." {
			names = append(names, e.FileName)
		}
	}
	sortStrings(names)
	if want := []string{"._meta", "build.log"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("main after the commit lists %q, want %q (no silly-renamed file)", names, want)
	}
}

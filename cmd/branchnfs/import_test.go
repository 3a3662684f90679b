package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/cowfs/importdir"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// readMain returns the content of every regular file of main, by path.
func readMain(t *testing.T, store string) map[string]string {
	t.Helper()
	s, err := openStore(context.Background(), store, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs, _, err := s.mgr.View("main")
	if err != nil {
		t.Fatal(err)
	}
	b := fs.Billy()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := b.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() {
				walk(p)
				continue
			}
			if !e.Mode().IsRegular() {
				continue
			}
			f, err := b.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimPrefix(p, "/")] = string(data)
		}
	}
	walk("/")
	return out
}

// readFolder returns the content of every regular file under dir.
func readFolder(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

// TestImportUpdate: after init --from DIR, ten edits in DIR come into
// main through import --update as exactly those ten changes, in one
// commit; live children of main make it refuse unless --force, and with
// --force they stay live on their snapshot. Run as a user who is not
// root, on real files.
func TestImportUpdate(t *testing.T) {
	testbin.Unprivileged(t, "TestImportUpdate", func(t *testing.T) {
		store := filepath.Join(shortTempDir(t), "s")
		src := t.TempDir()
		write := func(rel, data string) {
			t.Helper()
			p := filepath.Join(src, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 40; i++ {
			write(fmt.Sprintf("pkg%d/file%02d.go", i%4, i), fmt.Sprintf("package p%d // %d\n", i%4, i))
		}
		write("node_modules/dep/index.js", "module.exports = 1\n")
		write(".env", "TOKEN=1\n")
		if code, _, stderr := runCLI(t, "init", "--from", src, "--store", store); code != 0 {
			t.Fatalf("init --from: %d %s", code, stderr)
		}
		// Nothing changed yet.
		code, out, stderr := runCLI(t, "import", "--update", "--json", "--store", store)
		var r importResult
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("import --update: %d %q %q", code, out, stderr)
		}
		if r.Source != src || len(r.Paths) != 0 {
			t.Fatalf("update of an unchanged folder: %+v", r)
		}

		// Ten edits, and a touch (no edit).
		write("pkg0/file00.go", "package p0 // edited\n")
		write("pkg1/file01.go", "package p1 // EDIT\n")
		write("pkg2/file02.go", "package p2 // edited, longer than before\n")
		write(".env", "TOKEN=2\n")
		write("node_modules/dep/index.js", "module.exports = 2\n")
		write("pkg3/file03.go", "package p3 // 3\n")
		write("pkg3/new.go", "package p3\n")
		write("pkg1/new.go", "package p1\n")
		os.Remove(filepath.Join(src, "pkg0/file04.go"))
		os.Remove(filepath.Join(src, "pkg1/file05.go"))
		os.Chmod(filepath.Join(src, "pkg2/file06.go"), 0o600)
		want := map[string]string{
			"pkg0/file00.go": importdir.Modified, "pkg1/file01.go": importdir.Modified,
			"pkg2/file02.go": importdir.Modified, ".env": importdir.Modified,
			"node_modules/dep/index.js": importdir.Modified, "pkg2/file06.go": importdir.Modified,
			"pkg3/new.go": importdir.Added, "pkg1/new.go": importdir.Added,
			"pkg0/file04.go": importdir.Deleted, "pkg1/file05.go": importdir.Deleted,
		}

		// A live child of main: refused.
		if code, _, _ := runCLI(t, "fork", "main", "agent", "--store", store); code != 0 {
			t.Fatal("fork")
		}
		code, _, stderr = runCLI(t, "import", "--update", "--store", store)
		if code != exitHasChildren || !strings.Contains(stderr, "agent") || !strings.Contains(stderr, "--force") {
			t.Fatalf("import --update with a live child: %d %q", code, stderr)
		}
		code, out, stderr = runCLI(t, "import", "--update", "--force", "--json", "--store", store)
		r = importResult{}
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("import --update --force: %d %q %q", code, out, stderr)
		}
		got := map[string]string{}
		for _, p := range r.Paths {
			got[p.Path] = p.Kind
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("changes %v\nwant %v", got, want)
		}
		if len(r.Paths) != 10 || r.Added != 2 || r.Modified != 6 || r.Deleted != 2 || !reflect.DeepEqual(r.Children, []string{"agent"}) {
			t.Fatalf("summary %+v", r)
		}
		if m, f := readMain(t, store), readFolder(t, src); !reflect.DeepEqual(m, f) {
			t.Fatalf("main after the update differs from the folder:\n%v\n%v", m, f)
		}
		// The child is live and still sees the folder as imported.
		code, out, _ = runCLI(t, "list", "--json", "--store", store)
		if code != 0 || !strings.Contains(out, `"name": "agent"`) || !strings.Contains(out, `"state": "live"`) {
			t.Fatalf("list after the update: %s", out)
		}
		code, out, stderr = runCLI(t, "import", "--update", "--force", "--store", store)
		if code != 0 || !strings.Contains(out, "0 added, 0 modified, 0 deleted") {
			t.Fatalf("second update: %d %q %q", code, out, stderr)
		}
	})
}

func TestImportUsage(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "s")
	if code, _, _ := runCLI(t, "init", "--store", store); code != 0 {
		t.Fatal("init")
	}
	if code, _, stderr := runCLI(t, "import", "--store", store); code != exitUsage || !strings.Contains(stderr, "--update") {
		t.Fatalf("import without --update: %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "import", "--update", "--store", store); code != exitUsage || !strings.Contains(stderr, "--from DIR") {
		t.Fatalf("import --update without a recorded folder: %d %q", code, stderr)
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("f"), 0o644)
	if code, out, stderr := runCLI(t, "import", "--update", "--from", src, "--store", store); code != 0 || !strings.Contains(out, "1 added") {
		t.Fatalf("import --update --from: %d %q %q", code, out, stderr)
	}
	// Recorded for next time.
	if code, out, _ := runCLI(t, "import", "--update", "--store", store); code != 0 || !strings.Contains(out, "updated main from "+src) {
		t.Fatalf("import --update after --from: %d %q", code, out)
	}
}

// TestImportUpdateThroughServer: with a server running, import --update
// runs in the server through the control API, with the same refusal of
// live children, the same summary, and --from recorded (the status's
// source_dir follows). Run as a user who is not root.
func TestImportUpdateThroughServer(t *testing.T) {
	testbin.Unprivileged(t, "TestImportUpdateThroughServer", func(t *testing.T) {
		store := filepath.Join(shortTempDir(t), "s")
		base := t.TempDir()
		src := filepath.Join(base, "src")
		for _, f := range []string{"a.txt", "b.txt", "gone.txt"} {
			os.MkdirAll(src, 0o755)
			if err := os.WriteFile(filepath.Join(src, f), []byte(f+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if code, _, stderr := runCLI(t, "init", "--from", src, "--store", store); code != 0 {
			t.Fatalf("init --from: %d %s", code, stderr)
		}
		startServe(t, store)
		os.WriteFile(filepath.Join(src, "a.txt"), []byte("a, edited\n"), 0o644)
		os.WriteFile(filepath.Join(src, "new.txt"), []byte("new\n"), 0o644)
		os.Remove(filepath.Join(src, "gone.txt"))
		if code, _, _ := runCLI(t, "fork", "main", "agent", "--store", store); code != 0 {
			t.Fatal("fork")
		}
		code, _, stderr := runCLI(t, "import", "--update", "--store", store)
		if code != exitHasChildren || !strings.Contains(stderr, "agent") || !strings.Contains(stderr, "--force") {
			t.Fatalf("import --update with a live child, through the server: %d %q", code, stderr)
		}
		code, out, stderr := runCLI(t, "import", "--update", "--force", "--json", "--store", store)
		var r importResult
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("import --update --force through the server: %d %q %q", code, out, stderr)
		}
		got := map[string]string{}
		for _, p := range r.Paths {
			got[p.Path] = p.Kind
		}
		want := map[string]string{"a.txt": importdir.Modified, "new.txt": importdir.Added, "gone.txt": importdir.Deleted}
		if !reflect.DeepEqual(got, want) || r.Source != src || !reflect.DeepEqual(r.Children, []string{"agent"}) {
			t.Fatalf("summary %+v, want changes %v", r, want)
		}
		exported := filepath.Join(t.TempDir(), "main")
		if code, _, _ := runCLI(t, "export", "main", exported, "--store", store); code != 0 {
			t.Fatal("export main")
		}
		if m, f := readFolder(t, exported), readFolder(t, src); !reflect.DeepEqual(m, f) {
			t.Fatalf("main after the update differs from the folder:\n%v\n%v", m, f)
		}

		// --from, relative to the client's directory, is recorded.
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o755)
		os.WriteFile(filepath.Join(other, "o.txt"), []byte("o\n"), 0o644)
		t.Chdir(base)
		code, out, stderr = runCLI(t, "import", "--update", "--force", "--from", "other", "--store", store)
		if code != 0 || !strings.Contains(out, "updated main from "+other) || !strings.Contains(out, "1 added") {
			t.Fatalf("import --update --from other through the server: %d %q %q", code, out, stderr)
		}
		c, st, err := control.Dial(context.Background(), control.SocketPath(store), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if st.SourceDir != other {
			t.Fatalf("status source_dir %q after --from, want %q", st.SourceDir, other)
		}
		if code, _, stderr := runCLI(t, "import", "--update", "--from", filepath.Join(base, "nosuch"), "--store", store); code == 0 || !strings.Contains(stderr, "nosuch") {
			t.Fatalf("import --update --from a missing folder: %d %q", code, stderr)
		}
	})
}

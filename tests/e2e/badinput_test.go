package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	nfs "github.com/willscott/go-nfs-client/nfs"
)

// Item 6: bad input gets clear errors and leaves the store intact: bad
// branch names, fork of a missing parent, commit of an invalidated
// branch, MOUNT of a missing export, a 300-byte file name.
func TestBadInputLeavesStoreIntact(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	mainT, _ := c.mount(t, "/main")
	writeFile(t, mainT, "/keep.txt", []byte("keep me"))
	mustCLI(t, store, "fork", "main", "p1")
	mustCLI(t, store, "fork", "main", "p2")
	mustCLI(t, store, "commit", "p1") // invalidates p2
	before := listBranches(t, store)

	cliCases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"space in name", []string{"fork", "main", "bad name"}, 5, "invalid name"},
		{"slash in name", []string{"fork", "main", "a/b"}, 5, "invalid name"},
		{"dot-dot", []string{"fork", "main", ".."}, 5, "invalid name"},
		{"65 chars", []string{"fork", "main", strings.Repeat("x", 65)}, 5, "invalid name"},
		{"empty name", []string{"fork", "main", ""}, 5, "invalid name"},
		{"unicode name", []string{"fork", "main", "brånch"}, 5, "invalid name"},
		{"bad label", []string{"checkpoint", "main", "a b"}, 5, "invalid name"},
		{"missing parent", []string{"fork", "nosuch", "x"}, 3, "nosuch"},
		{"commit invalidated", []string{"commit", "p2"}, 6, "invalidated by the commit of p1"},
		{"abort invalidated twice", []string{"commit", "p2"}, 6, "p1"},
		{"commit main", []string{"commit", "main"}, 9, "main"},
		{"abort main", []string{"abort", "main"}, 9, "main"},
		{"restore missing checkpoint", []string{"restore", "main", "nope"}, 3, "nope"},
		{"missing args", []string{"fork", "main"}, 2, "PARENT NAME"},
	}
	for _, tc := range cliCases {
		t.Run("cli/"+tc.name, func(t *testing.T) {
			code, _, stderr := cli(t, store, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tc.code, tc.msg)
			}
		})
	}

	t.Run("api", func(t *testing.T) {
		ctx := context.Background()
		cl, _, err := control.Dial(ctx, control.SocketPath(store), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var ae *control.Error
		if _, err := cl.Fork(ctx, "main", "a b"); !errors.As(err, &ae) || ae.Code != control.CodeInvalidName || ae.Status != 400 {
			t.Fatalf("API fork with bad name: %v", err)
		}
		if _, err := cl.Fork(ctx, "nosuch", "x"); !errors.Is(err, branches.ErrNotFound) {
			t.Fatalf("API fork of missing parent: %v", err)
		}
		var ie *branches.InvalidatedError
		if _, err := cl.Commit(ctx, "p2"); !errors.As(err, &ie) || !strings.Contains(ie.By, "p1") {
			t.Fatalf("API commit of invalidated branch: %v", err)
		}
		// Malformed JSON straight on the socket.
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return net.Dial("unix", control.SocketPath(store))
		}}}
		token, err := control.ReadToken(control.TokenPath(store))
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, "http://branchnfs/v1/branches", strings.NewReader(`{"parent":`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"bad_request"`) {
			t.Fatalf("malformed JSON: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("mount", func(t *testing.T) {
		// Missing and invalidated branches: MNT3ERR_NOENT.
		for _, export := range []string{"/nosuch", "/p2", "/main/nosuch"} {
			if _, err := c.mnt(export); err != mntError(nfs.MNT3ErrNoEnt) {
				t.Errorf("MNT %q: %v, want MNT3ERR_NOENT", export, err)
			}
		}
		// Names that cannot be branches do not exist either.
		for _, export := range []string{"/a b", "/" + strings.Repeat("x", 300)} {
			if _, err := c.mnt(export); err != mntError(nfs.MNT3ErrNoEnt) {
				t.Errorf("MNT %.20q...: %v, want MNT3ERR_NOENT", export, err)
			}
		}
	})

	t.Run("long name", func(t *testing.T) {
		long := strings.Repeat("n", 300)
		_, err := mainT.Create("/"+long, 0o644)
		wantStatus(t, "CREATE of a 300-byte name", err, nfs.NFS3ErrNameTooLong)
		_, err = mainT.Mkdir("/"+long, 0o755)
		wantStatus(t, "MKDIR of a 300-byte name", err, nfs.NFS3ErrNameTooLong)
		wantStatus(t, "RENAME to a 300-byte name", mainT.Rename("/keep.txt", "/"+long), nfs.NFS3ErrNameTooLong)
		if haveLibnfs {
			src := filepath.Join(t.TempDir(), "f")
			os.WriteFile(src, []byte("x"), 0o644)
			if _, err := libnfs(t, "nfs-cp", src, nfsURL(srv.port, "/main/"+long)); err == nil {
				t.Error("nfs-cp to a 300-byte name succeeded")
			}
		}
	})

	t.Run("garbage RPC", func(t *testing.T) { garbage(t, srv.port) })

	// The store is intact: same branches, same data, the server still
	// serves, and so does a restarted one.
	check := func(when string) {
		t.Helper()
		after := listBranches(t, store)
		if !reflect.DeepEqual(names(before), names(after)) {
			t.Fatalf("%s: branches changed:\nbefore %v\nafter  %v", when, names(before), names(after))
		}
		for n, in := range before {
			if after[n].State != in.State || after[n].ID != in.ID {
				t.Fatalf("%s: branch %s changed: %+v -> %+v", when, n, in, after[n])
			}
		}
	}
	check("after bad input")
	if got := mustRead(t, mainT, "/keep.txt"); string(got) != "keep me" {
		t.Fatalf("keep.txt = %q", got)
	}
	srv.stop(t)
	srv = startServer(t, store, srv.port)
	check("after restart")
	if got := mustRead(t, mainT, "/keep.txt"); string(got) != "keep me" {
		t.Fatalf("keep.txt after restart = %q", got)
	}
}

func names(m map[string]branches.Info) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	sortStrings(out)
	return out
}

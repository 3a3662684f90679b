package control

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/branchnfs/branchnfs/nfsserver/control/controltest"
)

// startServer serves a fake backend on a socket in a temp dir.
func startServer(t *testing.T) (*controltest.Fake, *Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fb := controltest.New()
	srv, err := NewServer(ServerOptions{Backend: fb, Token: mustToken(t, dir), Status: func() Status {
		return Status{Version: "test", PID: 42, Store: dir, Listen: "127.0.0.1:12049", Port: 12049}
	}})
	if err != nil {
		t.Fatal(err)
	}
	sock := SocketPath(dir)
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	c, st, err := Dial(context.Background(), sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Port != 12049 || st.PID != 42 || st.LiveBranches != 1 {
		t.Fatalf("status = %+v", st)
	}
	t.Cleanup(c.Close)
	return fb, c, sock
}

func TestSocketMode(t *testing.T) {
	_, _, sock := startServer(t)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, want socket 0600", fi.Mode())
	}
}

func TestLifecycleThroughClient(t *testing.T) {
	_, c, _ := startServer(t)
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		in, err := c.Fork(ctx, "main", n)
		if err != nil {
			t.Fatalf("fork %s: %v", n, err)
		}
		if in.Name != n || in.Parent != "main" || in.State != branches.StateLive {
			t.Fatalf("fork %s = %+v", n, in)
		}
	}
	if _, err := c.Checkpoint(ctx, "a", "cp1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(ctx, "a", "cp1"); err != nil {
		t.Fatal(err)
	}
	if in, err := c.ForkCheckpoint(ctx, "a", "cp1", "a2"); err != nil || in.Parent != "a" {
		t.Fatalf("fork checkpoint = %+v, %v", in, err)
	}
	if _, err := c.Abort(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	d, err := c.Diff(ctx, "a")
	if err != nil || len(d.Changes) != 1 || d.Changes[0].Path != "a.txt" {
		t.Fatalf("diff = %+v, %v", d, err)
	}
	// a has an aborted child only in the fake's children list; clear it by
	// committing b first, which invalidates a.
	res, err := c.Commit(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Invalidated, []string{"a"}) || !res.FastPath {
		t.Fatalf("commit = %+v", res)
	}
	_, err = c.Commit(ctx, "a")
	var ie *branches.InvalidatedError
	if !errors.As(err, &ie) || ie.By != "commit of b into main" || !errors.Is(err, branches.ErrStale) {
		t.Fatalf("commit of invalidated branch: %v (%T)", err, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 4 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if in, err := c.Get(ctx, "a"); err != nil || in.State != branches.StateInvalidated {
		t.Fatalf("get = %+v, %v", in, err)
	}
}

// TestErrorMapping checks that every branches error reaches the client as
// the right code and HTTP status, and matches the same sentinel there.
func TestErrorMapping(t *testing.T) {
	fb, c, _ := startServer(t)
	ctx := context.Background()
	tests := []struct {
		name     string
		err      error
		code     string
		status   int
		sentinel error
	}{
		{"not_found", fmt.Errorf("%w: x", branches.ErrNotFound), CodeNotFound, 404, branches.ErrNotFound},
		{"exists", branches.ErrExists, CodeExists, 409, branches.ErrExists},
		{"invalid_name", branches.ErrInvalidName, CodeInvalidName, 400, branches.ErrInvalidName},
		{"invalidated", &branches.InvalidatedError{Branch: "x", By: "commit of y into main"}, CodeInvalidated, 410, branches.ErrInvalidated},
		{"stale", fmt.Errorf("%w: aborted", branches.ErrStale), CodeInvalidated, 410, branches.ErrStale},
		{"conflict", &branches.ConflictError{Branch: "x", Parent: "main", Paths: []string{"a", "b/c"}}, CodeConflict, 409, branches.ErrConflict},
		{"has_children", &branches.HasChildrenError{Branch: "x", Children: []string{"y"}}, CodeHasChildren, 409, branches.ErrHasChildren},
		{"read_only", branches.ErrReadOnly, CodeReadOnly, 403, branches.ErrReadOnly},
		{"not_owner", fmt.Errorf("%w: commit x: it is written through server h:/s", branches.ErrNotOwner), CodeNotOwner, 409, branches.ErrNotOwner},
		{"no_space", fmt.Errorf("commit: %w", branches.ErrNoSpace), CodeNoSpace, 507, branches.ErrNoSpace},
		{"internal", errors.New("disk on fire"), CodeInternal, 500, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, status := Classify(tt.err)
			if code != tt.code || status != tt.status {
				t.Fatalf("Classify = %s %d, want %s %d", code, status, tt.code, tt.status)
			}
			fb.Mu.Lock()
			fb.Fail = tt.err
			fb.Mu.Unlock()
			defer func() { fb.Mu.Lock(); fb.Fail = nil; fb.Mu.Unlock() }()
			_, err := c.Commit(ctx, "main")
			if err == nil {
				t.Fatal("no error")
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Fatalf("client error %v (%T) does not match %v", err, err, tt.sentinel)
			}
			if err.Error() != tt.err.Error() {
				t.Fatalf("message %q, want %q", err.Error(), tt.err.Error())
			}
			if !reflect.TypeOf(tt.err).AssignableTo(reflect.TypeOf(err)) && strings.HasPrefix(reflect.TypeOf(tt.err).String(), "*branches.") {
				t.Fatalf("client error type %T, want %T", err, tt.err)
			}
			var ae *Error
			if errors.As(err, &ae) && (ae.Code != tt.code || ae.Status != tt.status) {
				t.Fatalf("client Error = %+v", ae)
			}
		})
	}
}

// rawRequest sends a request over the socket without the client.
func rawRequest(t *testing.T, sock, method, path, body string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}}
	req, err := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ReadToken(TokenPath(filepath.Dir(sock)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	return resp.StatusCode, string(b)
}

func TestBadRequests(t *testing.T) {
	fb, _, sock := startServer(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad json", "POST", "/v1/branches", "{", 400, CodeBadRequest},
		{"unknown field", "POST", "/v1/branches", `{"parent":"main","name":"x","bogus":1}`, 400, CodeBadRequest},
		{"missing name", "POST", "/v1/branches", `{"parent":"main"}`, 400, CodeInvalidName},
		{"bad name", "POST", "/v1/branches", `{"parent":"main","name":"a b"}`, 400, CodeInvalidName},
		{"long name", "POST", "/v1/branches", `{"parent":"main","name":"` + strings.Repeat("x", 65) + `"}`, 400, CodeInvalidName},
		{"slash in name", "POST", "/v1/branches/a%2Fb/commit", "", 400, CodeInvalidName},
		{"missing parent", "POST", "/v1/branches", `{"parent":"nope","name":"x"}`, 404, CodeNotFound},
		{"missing label", "POST", "/v1/branches/main/checkpoints", `{}`, 400, CodeBadRequest},
		{"unknown endpoint", "GET", "/v1/nope", "", 404, CodeBadRequest},
		{"wrong method", "GET", "/v1/branches/main/commit", "", 404, CodeBadRequest},
		{"commit main", "POST", "/v1/branches/main/commit", "", 403, CodeReadOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawRequest(t, sock, tt.method, tt.path, tt.body)
			if status != tt.status || !strings.Contains(body, `"code": "`+tt.code+`"`) {
				t.Fatalf("got %d %s, want %d code %s", status, body, tt.status, tt.code)
			}
		})
	}
	// Nothing of the above changed the store.
	list, _ := fb.List(context.Background())
	if len(list) != 1 || list[0].Name != "main" {
		t.Fatalf("store changed: %+v", list)
	}
}

func TestPanicKeepsServing(t *testing.T) {
	fb, c, _ := startServer(t)
	ctx := context.Background()
	fb.Mu.Lock()
	fb.Panic = true
	fb.Mu.Unlock()
	_, err := c.Fork(ctx, "main", "x")
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeInternal || ae.Status != 500 {
		t.Fatalf("panicking backend: %v", err)
	}
	fb.Mu.Lock()
	fb.Panic = false
	fb.Mu.Unlock()
	if _, err := c.Fork(ctx, "main", "x"); err != nil {
		t.Fatalf("after panic: %v", err)
	}
}

func TestDialNoServer(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, SocketName)
	if _, _, err := Dial(context.Background(), sock, time.Second); !errors.Is(err, ErrNoServer) {
		t.Fatalf("missing socket: %v", err)
	}
	// A stale socket: the file exists but nobody listens.
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("stale socket gone: %v", err)
	}
	if _, _, err := Dial(context.Background(), sock, time.Second); !errors.Is(err, ErrNoServer) {
		t.Fatalf("stale socket: %v", err)
	}
	// Listen replaces the stale socket.
	ln, err = Listen(sock)
	if err != nil {
		t.Fatalf("Listen over stale socket: %v", err)
	}
	ln.Close()
}

func TestDialPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores socket permissions")
	}
	_, _, sock := startServer(t)
	os.Chmod(sock, 0)
	defer os.Chmod(sock, 0o600)
	if _, _, err := Dial(context.Background(), sock, time.Second); err == nil || errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("Dial without permission: %v", err)
	}
}

func TestListenRefusesLongPathAndNonSocket(t *testing.T) {
	if _, err := Listen("/tmp/" + strings.Repeat("d", 120) + "/control.sock"); err == nil || !strings.Contains(err.Error(), "shorter store path") {
		t.Fatalf("long path: %v", err)
	}
	f, err := os.CreateTemp("", "notasocket")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer os.Remove(f.Name())
	if _, err := Listen(f.Name()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file: %v", err)
	}
}

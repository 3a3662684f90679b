package control

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control/controltest"
)

// Commit and abort of a branch NFS clients use are refused with in_use
// (409) unless forced.
func TestInUseRefusal(t *testing.T) {
	fb := controltest.New()
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := fb.Fork(ctx, "main", n); err != nil {
			t.Fatal(err)
		}
	}
	users := map[string][]string{
		"a": {"mac:/a mounted"},
		"b": {"127.0.0.1:900 used its files 3s ago"},
		"c": {"mac:/c mounted"},
	}
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	token := mustToken(t, dir)
	srv, err := NewServer(ServerOptions{Backend: fb, Token: token, InUse: func(b string) []string { return users[b] }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	post := func(path, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("/v1/branches/a/commit", "")
	if code != http.StatusConflict || !strings.Contains(body, `"code": "in_use"`) || !strings.Contains(body, `"mac:/a mounted"`) {
		t.Fatalf("commit of a mounted branch: %d %s", code, body)
	}
	if code, body := post("/v1/branches/b/abort", `{"force": false}`); code != http.StatusConflict || !strings.Contains(body, "used its files") {
		t.Fatalf("abort of a used branch: %d %s", code, body)
	}
	if in, _ := fb.Get(ctx, "a"); in.State != branches.StateLive {
		t.Fatalf("a is %s after a refused commit", in.State)
	}
	if code, body := post("/v1/branches/a/abort", `{"force": true}`); code != http.StatusOK {
		t.Fatalf("forced abort: %d %s", code, body)
	}
	if code, body := post("/v1/branches/b/abort", `{"nonsense": 1}`); code != http.StatusBadRequest {
		t.Fatalf("bad body: %d %s", code, body)
	}

	// Through the client: a typed error, and the forced variants.
	ln, err := Listen(SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ctx, ln)
	defer srv.Close()
	c := NewClient(SocketPath(dir))
	defer c.Close()
	_, err = c.Abort(ctx, "b")
	var ue *InUseError
	if !errors.As(err, &ue) || ue.Branch != "b" || !reflect.DeepEqual(ue.Clients, users["b"]) {
		t.Fatalf("Abort of a used branch: %v", err)
	}
	if _, err := c.ForceAbort(ctx, "b"); err != nil {
		t.Fatalf("ForceAbort: %v", err)
	}
	if _, err := c.Commit(ctx, "c"); !errors.Is(err, ErrInUse) {
		t.Fatalf("Commit of a mounted branch: %v", err)
	}
	if _, err := c.ForceCommit(ctx, "c"); err != nil {
		t.Fatalf("ForceCommit: %v", err)
	}
}

func TestInUseErrorRoundTrip(t *testing.T) {
	err := &InUseError{Branch: "a", Clients: []string{"mac:/a mounted"}}
	body, status := makeErrorBody(err)
	if status != http.StatusConflict || body.Error.Code != CodeInUse {
		t.Fatalf("classified as %d %s", status, body.Error.Code)
	}
	back := body.Error.toError(status)
	var ue *InUseError
	if !errors.As(back, &ue) || !errors.Is(back, ErrInUse) || !reflect.DeepEqual(ue, err) {
		t.Fatalf("round trip: %#v", back)
	}
	if !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "mac:/a mounted") {
		t.Fatalf("message: %s", err)
	}
}

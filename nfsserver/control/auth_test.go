package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/lograte"
)

// mustToken makes the API token of store directory dir.
func mustToken(t *testing.T, dir string) string {
	t.Helper()
	tok, err := EnsureToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestEnsureToken(t *testing.T) {
	dir := t.TempDir()
	tok := mustToken(t, dir)
	if len(tok) != 2*tokenBytes {
		t.Fatalf("token %q: want %d hex digits", tok, 2*tokenBytes)
	}
	fi, err := os.Stat(TokenPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode())
	}
	if again := mustToken(t, dir); again != tok {
		t.Fatalf("token changed on the second call: %q, then %q", tok, again)
	}
	if other := mustToken(t, t.TempDir()); other == tok {
		t.Fatal("two stores got the same token")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("store holds %d files after making the token, want only %s", len(ents), TokenName)
	}
	// A token others can read is refused, not used.
	if err := os.Chmod(TokenPath(dir), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureToken(dir); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("world-readable token: err %v, want a refusal saying to remove it", err)
	}
}

// A request through a TCP forward without the token, or with a wrong one,
// is refused with 401 and runs nothing; with the token it works.
func TestTokenOverTCP(t *testing.T) {
	fb, _, dir := startJobServerIn(t)
	ctx := context.Background()
	if _, err := fb.Fork(ctx, "main", "b"); err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + forward(t, SocketPath(dir))
	marker := filepath.Join(t.TempDir(), "ran")
	req := JobRequest{Kind: JobExec, Branch: "b", Argv: []string{"/bin/sh", "-c", "touch " + marker}}

	for _, tok := range []string{"", strings.Repeat("0", 2*tokenBytes)} {
		t.Setenv(TokenEnv, tok)
		_, _, err := Dial(ctx, addr, 5*time.Second)
		if !errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), TokenName) {
			t.Fatalf("dial with token %q: err %v, want unauthorized naming %s", tok, err, TokenName)
		}
		c := NewClient(addr)
		err = c.do(ctx, http.MethodPost, "/v1/jobs", req, nil)
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Code != CodeUnauthorized {
			t.Fatalf("job with token %q: err %v, want 401 unauthorized", tok, err)
		}
		if _, err := c.Fork(ctx, "main", "nope"); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("fork with token %q: err %v, want unauthorized", tok, err)
		}
		c.Close()
	}
	// The raw answer: 401 with the error JSON.
	resp, err := http.Post("http://"+strings.TrimPrefix(addr, "tcp://")+"/v1/jobs", "application/json",
		strings.NewReader(`{"kind":"exec","branch":"b","argv":["/bin/sh","-c","touch `+marker+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"code": "unauthorized"`) {
		t.Fatalf("raw job without token: %d %s", resp.StatusCode, body)
	}

	t.Setenv(TokenEnv, "")
	t.Setenv(TokenFileEnv, TokenPath(dir))
	c, _, err := Dial(ctx, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var jobs []Job
	if err := c.do(ctx, http.MethodGet, "/v1/jobs", nil, &jobs); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs after refused requests: %v %+v, want none", err, jobs)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused job ran: %v", err)
	}
	if _, err := fb.Get(ctx, "nope"); err == nil {
		t.Fatal("a refused fork made its branch")
	}
	j := startJob(t, c, req)
	if j = waitJob(t, c, j.ID); j.State != JobDone || j.Records[0].ExitCode != 0 {
		t.Fatalf("job with the token: %+v", j)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the job with the token did not run: %v", err)
	}
}

// The unix socket needs the token too: a forward connects through it.
func TestTokenOnSocket(t *testing.T) {
	_, _, sock := startServer(t)
	if err := os.WriteFile(TokenPath(filepath.Dir(sock)), []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := Dial(context.Background(), sock, 5*time.Second)
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("socket with a wrong token: %v, want unauthorized", err)
	}
	if err := os.Remove(TokenPath(filepath.Dir(sock))); err != nil {
		t.Fatal(err)
	}
	_, _, err = Dial(context.Background(), sock, 5*time.Second)
	if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "no token") {
		t.Fatalf("socket without a token file: %v, want unauthorized saying the client has no token", err)
	}
}

func TestNewServerNeedsToken(t *testing.T) {
	fb, _, _ := startServer(t)
	if _, err := NewServer(ServerOptions{Backend: fb}); err == nil || !strings.Contains(err.Error(), "Token") {
		t.Fatalf("NewServer without a token: %v, want an error", err)
	}
}

// Refused requests are logged once, then at most once every
// lograte.Every with the count of those not logged: a flood of bad
// requests cannot flood the log.
func TestRefusalsDoNotFloodTheLog(t *testing.T) {
	fb, _, _ := startServer(t)
	var logBuf strings.Builder
	s, err := NewServer(ServerOptions{Backend: fb, Token: "right",
		Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for range 200 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/status", nil)
		req.Header.Set("Authorization", "Bearer wrong")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("status %d for a wrong token", rec.Code)
		}
	}
	if n := strings.Count(logBuf.String(), "control: refused"); n != 1 {
		t.Fatalf("200 refusals within a second logged %d lines, want 1:\n%s", n, logBuf.String())
	}
	// After the interval, the next refusal is logged with the count of
	// those that were not.
	ok, n := s.refused.Allow(time.Now().Add(lograte.Every + time.Second))
	if !ok || n != 199 {
		t.Fatalf("after the interval: allow = %v, %d unlogged; want true, 199", ok, n)
	}
}

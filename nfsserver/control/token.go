package control

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TokenName is the file name of the API token inside the store directory.
const TokenName = "control.token"

// TokenPath returns the API token path of a store directory.
func TokenPath(storeDir string) string { return filepath.Join(storeDir, TokenName) }

// Environment variables a client reaching the API over TCP takes its token
// from: the token itself, else a file holding it.
const (
	TokenEnv     = "BRANCHNFS_CONTROL_TOKEN"
	TokenFileEnv = "BRANCHNFS_CONTROL_TOKEN_FILE"
)

// tokenBytes is the token's entropy; the file holds it in hex.
const tokenBytes = 32

// ErrUnauthorized matches errors with code unauthorized: the request
// carried no token, or a wrong one.
var ErrUnauthorized = errors.New("control: unauthorized")

// EnsureToken returns the store's API token, creating STORE/control.token
// (mode 0600, atomically: a temporary file renamed into place) if it is
// missing. An existing token is kept, so clients holding a copy go on
// working across restarts. The caller must hold the store's lock.
func EnsureToken(storeDir string) (string, error) {
	path := TokenPath(storeDir)
	tok, err := ReadToken(path)
	if err == nil {
		fi, err := os.Lstat(path)
		if err != nil {
			return "", fmt.Errorf("control: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("control: %s is %v, readable by others than its owner: remove it (serve then makes a new token) and copy the new one to your clients", path, fi.Mode())
		}
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w (remove it: serve then makes a new token)", err)
	}
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("control: token: %w", err)
	}
	tok = hex.EncodeToString(b)
	f, err := os.CreateTemp(storeDir, "."+TokenName+".*") // mode 0600
	if err != nil {
		return "", fmt.Errorf("control: token: %w", err)
	}
	defer os.Remove(f.Name()) // fails once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", fmt.Errorf("control: token: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("control: token: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("control: token: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("control: token: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("control: token: %w", err)
	}
	return tok, nil
}

// ReadToken reads a token file: one line of hex. The error matches
// fs.ErrNotExist when the file is missing.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("control: API token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("control: API token %s is malformed: want one line of hex", path)
	}
	return tok, nil
}

// clientToken finds the token a client sends for socket (see NewClient).
func clientToken(socket string) (string, error) {
	if !strings.HasPrefix(socket, "tcp://") {
		return ReadToken(TokenPath(filepath.Dir(socket)))
	}
	if tok := strings.TrimSpace(os.Getenv(TokenEnv)); tok != "" {
		return tok, nil
	}
	if p := os.Getenv(TokenFileEnv); p != "" {
		return ReadToken(p)
	}
	return "", fmt.Errorf("control: no API token for %s: set $%s to the server's STORE/%s, or $%s to a copy of that file",
		socket, TokenEnv, TokenName, TokenFileEnv)
}

// authorize answers 401 to a request without the server's token. Every
// request needs it, from the unix socket too: the server cannot tell a
// local client from a forward (socat, SSH, a VM's port forward) that
// connects to the socket on behalf of anyone who can reach its TCP port.
func (s *Server) authorize(h http.Handler) http.Handler {
	want := []byte("Bearer " + s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		why := "no token"
		if len(got) > 0 {
			why = "a wrong token"
		}
		if ok, n := s.refused.Allow(time.Now()); ok {
			s.opts.Logger.Warn("control: refused a request with "+why, "method", r.Method, "path", r.URL.Path,
				"refused_unlogged", n)
		}
		where := s.opts.TokenFile
		if where == "" {
			where = "STORE/" + TokenName
		}
		writeJSON(w, http.StatusUnauthorized, errorBody{Error: errorDetail{Code: CodeUnauthorized,
			Message: fmt.Sprintf("unauthorized: the request carried %s; send \"Authorization: Bearer TOKEN\" with the token in the server's %s (over a forward, set $%s to it)",
				why, where, TokenEnv)}})
	})
}

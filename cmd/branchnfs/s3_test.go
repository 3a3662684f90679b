package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/nfsserver/s3gw"
)

func TestS3FlagUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--s3", "0.0.0.0:9000"}, "not a loopback address"},
		{[]string{"serve", "--s3", "nonsense"}, "--s3"},
	} {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			dir := shortTempDir(t)
			code, _, stderr := runCLI(t, append(tt.args, "--store", filepath.Join(dir, "store"))...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "store")); err == nil {
				t.Errorf("a refused serve made the store")
			}
		})
	}
}

func TestS3Credentials(t *testing.T) {
	store := filepath.Join(shortTempDir(t), "store")
	if code, _, stderr := runCLI(t, "s3", "credentials", "--store", store); code == 0 || !strings.Contains(stderr, "no store") {
		t.Fatalf("credentials of no store: exit %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "init", "--store", store); code != 0 {
		t.Fatalf("init: %d %s", code, stderr)
	}
	code, out, _ := runCLI(t, "s3", "credentials", "--store", store)
	if code != 0 || !strings.HasPrefix(out, "[branchnfs]\naws_access_key_id = BNFS") || !strings.Contains(out, "\naws_secret_access_key = ") {
		t.Fatalf("s3 credentials: %d %q, want an aws CLI profile", code, out)
	}
	fi, err := os.Stat(s3gw.CredentialsPath(store))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v, want mode 0600", fi, err)
	}
	// The same key every time, and as JSON.
	_, again, _ := runCLI(t, "s3", "credentials", "--store", store)
	if again != out {
		t.Errorf("a second call printed another key:\n%s\n%s", out, again)
	}
	_, js, _ := runCLI(t, "s3", "credentials", "--json", "--store", store)
	var c s3gw.Credentials
	if err := json.Unmarshal([]byte(js), &c); err != nil || !strings.Contains(out, c.AccessKeyID) || !strings.Contains(out, c.SecretAccessKey) || c.SecretAccessKey == "" {
		t.Errorf("--json: %q (%v)", js, err)
	}
	// A file others can read is refused, with the fix.
	os.Chmod(s3gw.CredentialsPath(store), 0o644)
	if code, _, stderr := runCLI(t, "s3", "credentials", "--store", store); code == 0 || !strings.Contains(stderr, "remove it") {
		t.Errorf("credentials readable by others: exit %d %q", code, stderr)
	}
}

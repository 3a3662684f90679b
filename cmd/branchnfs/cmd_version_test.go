package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolveVersion(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/branchnfs/branchnfs", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	devel := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	tests := []struct {
		name          string
		ver, com, dat string
		bi            *debug.BuildInfo
		want          buildVersion
		line          string
	}{
		{"release ldflags win", "1.5.0", "feedbeef", "2026-12-01T00:00:00Z", vcs,
			buildVersion{Version: "1.5.0", Commit: "feedbeef", Date: "2026-12-01T00:00:00Z"},
			"1.5.0 (commit feedbeef, built 2026-12-01T00:00:00Z)"},
		{"go install module@version", "", "", "", vcs,
			buildVersion{Version: "v1.4.0", Commit: "0123456789abcdef0123", Date: "2026-11-30T10:00:00Z", Modified: true},
			"v1.4.0 (commit 0123456789ab+dirty, built 2026-11-30T10:00:00Z)"},
		{"go build in the work tree", "", "", "", devel, buildVersion{Version: "devel"}, "devel"},
		{"no build information", "", "", "", nil, buildVersion{Version: "devel"}, "devel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolveVersion(tt.ver, tt.com, tt.dat, tt.bi)
			if got.Go == "" || got.OS == "" || got.Arch == "" {
				t.Fatalf("platform missing: %+v", got)
			}
			got.Go, got.OS, got.Arch = "", "", ""
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.line {
				t.Fatalf("String() = %q, want %q", s, tt.line)
			}
		})
	}
}

// TestVersionCommand: version --json is the JSON contract, and --version
// prints what version prints.
func TestVersionCommand(t *testing.T) {
	code, out, _ := runCLI(t, "version", "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version --json: %d %q", code, out)
	}
	for _, k := range []string{"version", "go", "os", "arch"} {
		if s, _ := v[k].(string); s == "" {
			t.Errorf("version --json: no %q in %s", k, out)
		}
	}
	code, plain, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(plain, "branchnfs "+versionInfo().Version+"\n") || !strings.Contains(plain, "go:") {
		t.Fatalf("version: %d %q", code, plain)
	}
	if code, flag, _ := runCLI(t, "--version"); code != 0 || flag != plain {
		t.Fatalf("--version: %d %q, want %q", code, flag, plain)
	}
	if code, _, _ := runCLI(t, "version", "extra"); code != exitUsage {
		t.Fatalf("version with an argument: %d", code)
	}
}

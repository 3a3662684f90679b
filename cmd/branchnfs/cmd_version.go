package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Set by release builds (.goreleaser.yaml):
//
//	-ldflags "-X main.version=1.2.3 -X main.commit=SHA -X main.date=RFC3339"
//
// A build without them (go install, go build) takes them from the build
// information the go command records (versionInfo).
var (
	version string
	commit  string
	date    string
)

// buildVersion is what `branchnfs version --json` prints. Field names are
// part of the stable JSON output (README.md).
type buildVersion struct {
	Version string `json:"version"` // "1.2.3" in a release, "v1.2.3" from go install @v1.2.3, "devel" otherwise
	Commit  string `json:"commit,omitempty"`
	Date    string `json:"date,omitempty"` // of the commit, or of the release build; RFC 3339
	// Modified: built from a work tree with uncommitted changes.
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

// versionInfo returns this binary's version: the ldflags of a release
// build, else the go command's build information.
func versionInfo() buildVersion {
	return resolveVersion(version, commit, date, readBuildInfo())
}

func readBuildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

// resolveVersion fills in what the ldflags left empty from bi (nil: none).
func resolveVersion(ver, com, dat string, bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: ver, Commit: com, Date: dat, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi == nil {
		if v.Version == "" {
			v.Version = "devel"
		}
		return v
	}
	if v.Version == "" {
		// go install module@v1.2.3 records v1.2.3; a build in the module's
		// own work tree records "(devel)" or, with VCS stamping, a
		// pseudo-version.
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			v.Version = mv
		} else {
			v.Version = "devel"
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if v.Commit == "" {
				v.Commit = s.Value
			}
		case "vcs.time":
			if v.Date == "" {
				v.Date = s.Value
			}
		case "vcs.modified":
			v.Modified = v.Modified || (s.Value == "true" && com == "")
		}
	}
	if v.Go == "" {
		v.Go = bi.GoVersion
	}
	return v
}

// String is the one-line form: the banner and the log show it.
func (v buildVersion) String() string {
	s := v.Version
	var extra []string
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += "+dirty"
		}
		extra = append(extra, "commit "+c)
	}
	if v.Date != "" {
		extra = append(extra, "built "+v.Date)
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

type versionOptions struct {
	*globalOptions
	JSON bool
}

func newVersionCommand(g *globalOptions) *cobra.Command {
	opts := &versionOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date of this binary",
		Long: `Print the version, commit and build date of this binary, and the Go
version and platform it was built for. A release carries them from its
build; a binary built with go install or go build takes them from the
module version and the commit the go command recorded. --json prints
{version, commit, date, modified, go, os, arch}.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVersion(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the version as JSON")
	return cmd
}

func runVersion(o *versionOptions) error {
	v := versionInfo()
	if o.JSON {
		return writeJSON(o.stdout, v)
	}
	printVersion(o.stdout, v)
	return nil
}

func printVersion(w io.Writer, v buildVersion) {
	fmt.Fprintf(w, "branchnfs %s\n", v.Version)
	if v.Commit != "" {
		dirty := ""
		if v.Modified {
			dirty = " (with uncommitted changes)"
		}
		fmt.Fprintf(w, "commit:  %s%s\n", v.Commit, dirty)
	}
	if v.Date != "" {
		fmt.Fprintf(w, "date:    %s\n", v.Date)
	}
	fmt.Fprintf(w, "go:      %s %s/%s\n", v.Go, v.OS, v.Arch)
}

// addVersionFlag gives root a --version flag that prints what `version`
// prints.
func addVersionFlag(root *cobra.Command) {
	v := versionInfo()
	root.Version = v.Version
	var b strings.Builder
	printVersion(&b, v)
	root.SetVersionTemplate(strings.ReplaceAll(b.String(), "{{", "{{`{{`}}"))
}

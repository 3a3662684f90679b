package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

// The service runs `branchnfs serve` for the user, started at login and
// restarted when it fails: a systemd --user unit on Linux, a launchd agent
// on macOS. Neither needs root. The file names and the unit's contents are
// part of the packaging (packaging/), so they change only together.
const (
	serviceUnitName = "branchnfs.service"         // systemd --user unit
	serviceLabel    = "io.github.branchnfs.serve" // launchd label
	serviceLogName  = "serve.log"                 // in ~/Library/Logs/branchnfs on macOS
	// serviceStopTimeout is how long the service manager waits after
	// SIGTERM before it kills the server: closing syncs the store.
	serviceStopTimeoutSec = 60
)

// serviceSpec is what a service file runs.
type serviceSpec struct {
	Binary string   // absolute path of the branchnfs binary
	Args   []string // after the binary: serve and its flags
	LogDir string   // macOS: where stdout and stderr go
	// Header is the comment the file starts with; "" says that service
	// install wrote it.
	Header string
}

func (s serviceSpec) header() string {
	if s.Header != "" {
		return s.Header
	}
	return `Written by "branchnfs service install"; run it again to change the flags.`
}

// packagedUnitSpec is the unit the Debian and RPM packages install in
// /usr/lib/systemd/user (packaging/systemd/branchnfs.service): the default
// store of whoever enables it. A unit written by service install, in the
// user's own directory, takes precedence over it.
var packagedUnitSpec = serviceSpec{
	Binary: "/usr/bin/branchnfs",
	Args:   []string{"serve"},
	Header: "Installed by the branchnfs package; off until you enable it for yourself:\n" +
		"#   systemctl --user enable --now branchnfs\n" +
		"# (\"branchnfs service install\" writes your own unit with your flags instead).",
}

// serveArgs are the arguments of the service's `branchnfs serve`.
func serveArgs(store, listen, mount, from string) []string {
	args := []string{"serve", "--store", store}
	if listen != "" {
		args = append(args, "--listen", listen)
	}
	if mount != "" {
		args = append(args, "--mount", mount)
	}
	if from != "" {
		args = append(args, "--from", from)
	}
	return args
}

// systemdUnit is the text of the systemd --user unit. The server tells
// systemd it is ready once its NFS port listens (Type=notify, sdnotify.go).
func systemdUnit(s serviceSpec) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# %s
[Unit]
Description=branchnfs: copy-on-write branches of a workspace over NFSv3
Documentation=https://github.com/branchnfs/branchnfs

[Service]
Type=notify
NotifyAccess=main
ExecStart=%s
Restart=on-failure
RestartSec=2s
TimeoutStopSec=%ds
# SIGTERM stops the server cleanly: requests in flight finish, the store
# is synced and closed.
KillSignal=SIGTERM
SuccessExitStatus=130

[Install]
WantedBy=default.target
`, s.header(), systemdCommand(append([]string{s.Binary}, s.Args...)), serviceStopTimeoutSec)
	return b.Bytes()
}

// systemdCommand quotes a command line for ExecStart: each word in double
// quotes when it needs them, with systemd's own escapes for %, $ and \.
func systemdCommand(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		w = strings.ReplaceAll(w, "%", "%%")
		w = strings.ReplaceAll(w, "$", "$$")
		if w != "" && !strings.ContainsAny(w, " \t\"'\\;") {
			out[i] = w
			continue
		}
		w = strings.ReplaceAll(w, `\`, `\\`)
		w = strings.ReplaceAll(w, `"`, `\"`)
		out[i] = `"` + w + `"`
	}
	return strings.Join(out, " ")
}

// splitSystemdCommand undoes systemdCommand.
func splitSystemdCommand(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case quoted && c == '"':
			quoted = false
		case c == '"' && !quoted:
			quoted, inWord = true, true
		case !quoted && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case (c == '%' || c == '$') && i+1 < len(line) && line[i+1] == c:
			cur.WriteByte(c)
			inWord = true
			i++
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// launchdPlist is the text of the launchd agent: started at login,
// restarted after a crash but not after a clean stop, scheduled as an
// interactive process (an editor waits on it), its output in LogDir.
func launchdPlist(s serviceSpec) []byte {
	var b bytes.Buffer
	esc := func(v string) string {
		var e bytes.Buffer
		xml.EscapeText(&e, []byte(v))
		return e.String()
	}
	logPath := esc(filepath.Join(s.LogDir, serviceLogName))
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- ` + strings.ReplaceAll(s.header(), "--", "- -") + ` -->
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + serviceLabel + `</string>
	<key>ProgramArguments</key>
	<array>
`)
	for _, a := range append([]string{s.Binary}, s.Args...) {
		fmt.Fprintf(&b, "\t\t<string>%s</string>\n", esc(a))
	}
	fmt.Fprintf(&b, `	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>ProcessType</key>
	<string>Interactive</string>
	<key>ExitTimeOut</key>
	<integer>%d</integer>
	<key>StandardOutPath</key>
	<string>%s</string>
	<key>StandardErrorPath</key>
	<string>%s</string>
</dict>
</plist>
`, serviceStopTimeoutSec, logPath, logPath)
	return b.Bytes()
}

// parsePlist decodes an XML property list into Go values: map[string]any
// for dict, []any for array, string, bool, int64 (integer) and float64
// (real). It accepts what launchd reads in the XML form.
func parsePlist(data []byte) (any, error) {
	d := xml.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("plist: no <plist> element: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if se.Name.Local != "plist" {
				return nil, fmt.Errorf("plist: root element <%s>, want <plist>", se.Name.Local)
			}
			v, end, err := plistValue(d)
			if err != nil {
				return nil, err
			}
			if end {
				return nil, errors.New("plist: empty <plist>")
			}
			return v, nil
		}
	}
}

// plistValue reads the next value; end reports the end of the enclosing
// element instead.
func plistValue(d *xml.Decoder) (v any, end bool, err error) {
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, false, fmt.Errorf("plist: %w", err)
		}
		switch t := tok.(type) {
		case xml.EndElement:
			return nil, true, nil
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return nil, false, fmt.Errorf("plist: stray text %q", t)
			}
		case xml.StartElement:
			switch t.Name.Local {
			case "dict":
				m := map[string]any{}
				for {
					k, end, err := plistValue(d)
					if err != nil {
						return nil, false, err
					}
					if end {
						return m, false, nil
					}
					key, ok := k.(plistKey)
					if !ok {
						return nil, false, fmt.Errorf("plist: dict entry %v without a <key>", k)
					}
					val, end, err := plistValue(d)
					if err != nil {
						return nil, false, err
					}
					if end {
						return nil, false, fmt.Errorf("plist: key %q without a value", key)
					}
					if _, dup := m[string(key)]; dup {
						return nil, false, fmt.Errorf("plist: key %q twice", key)
					}
					m[string(key)] = val
				}
			case "array":
				a := []any{}
				for {
					val, end, err := plistValue(d)
					if err != nil {
						return nil, false, err
					}
					if end {
						return a, false, nil
					}
					a = append(a, val)
				}
			case "true", "false":
				if err := d.Skip(); err != nil {
					return nil, false, err
				}
				return t.Name.Local == "true", false, nil
			case "key", "string", "integer", "real", "date", "data":
				var s string
				if err := d.DecodeElement(&s, &t); err != nil {
					return nil, false, fmt.Errorf("plist: <%s>: %w", t.Name.Local, err)
				}
				switch t.Name.Local {
				case "key":
					return plistKey(s), false, nil
				case "integer":
					var n int64
					if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil {
						return nil, false, fmt.Errorf("plist: <integer>%s</integer>: %w", s, err)
					}
					return n, false, nil
				case "real":
					var f float64
					if _, err := fmt.Sscan(strings.TrimSpace(s), &f); err != nil {
						return nil, false, fmt.Errorf("plist: <real>%s</real>: %w", s, err)
					}
					return f, false, nil
				}
				return s, false, nil
			default:
				return nil, false, fmt.Errorf("plist: unknown element <%s>", t.Name.Local)
			}
		}
	}
}

type plistKey string

// serviceStatus is the --json output of service status. Field names are
// part of the stable JSON output (README.md).
type serviceStatus struct {
	// File is the unit or agent file; Installed reports whether it exists.
	File      string `json:"file"`
	Installed bool   `json:"installed"`
	// Loaded: the service manager knows the service. Running: it runs it.
	Loaded  bool `json:"loaded"`
	Running bool `json:"running"`
	PID     int  `json:"pid,omitempty"`
	// State is the service manager's own word (systemd: active,
	// inactive, failed...; launchd: running, not running...), or why it
	// could not be asked.
	State string `json:"state"`
	// Store and Listen are the server's, from its control API when it
	// answers, else from the installed file.
	Store   string `json:"store,omitempty"`
	Listen  string `json:"listen,omitempty"`
	Version string `json:"version,omitempty"` // of the running server
	Log     string `json:"log"`               // where the server's log goes
	// Mounts are the NFS mounts of the server's port; with no server
	// answering they hang or fail (StaleMounts).
	Mounts      []string `json:"mounts"`
	StaleMounts bool     `json:"stale_mounts"`
	// Hints say what to do next.
	Hints []string `json:"hints,omitempty"`
}

// osServiceState is what the OS's service manager says of the service.
type osServiceState struct {
	Loaded, Running bool
	PID             int
	State           string
}

type serviceOptions struct {
	*globalOptions
	Listen      string
	AllowRemote bool
	Mount       string
	From        string
	JSON        bool
	Lines       int
	Follow      bool
	// Binary: the branchnfs the service runs (default this one).
	Binary string
	// NoStart: write the file only (packaging, tests).
	NoStart bool
}

func newServiceCommand(g *globalOptions) *cobra.Command {
	opts := &serviceOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "service install|uninstall|status|logs",
		Short: "Run the server as your own background service (systemd --user, launchd agent)",
		Long: `Keep branchnfs serve running for you, started at login and restarted if it
fails, without root: a systemd --user unit (` + serviceUnitName + `) on Linux,
a launchd agent (` + serviceLabel + `) on macOS.

  install    write the unit with the serve flags given, load and (re)start it;
             running it again replaces the flags
  uninstall  stop the service and remove the unit
  status     whether it is loaded and running, its pid, address and log,
             and mounts left behind by a stopped server (--json)
  logs       the server's log (-n lines, -f to follow)`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown service subcommand %q: want install, uninstall, status or logs", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	install := &cobra.Command{
		Use:   "install",
		Short: "Write, load and start the service with these serve flags",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServiceInstall(cmd.Context(), opts)
		},
	}
	install.Flags().StringVar(&opts.Listen, "listen", "", "serve --listen (default "+defaultListen+")")
	install.Flags().BoolVar(&opts.AllowRemote, "allow-remote", false, "serve --allow-remote: allow a --listen address other than loopback")
	install.Flags().StringVar(&opts.Mount, "mount", "", "serve --mount")
	install.Flags().StringVar(&opts.From, "from", "", "serve --from: import this directory when the store is created")
	install.Flags().StringVar(&opts.Binary, "binary", "", "the branchnfs binary the service runs (default this one)")
	install.Flags().BoolVar(&opts.NoStart, "no-start", false, "write the unit only: do not load or start it")
	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Stop the service and remove it",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServiceUninstall(cmd.Context(), opts)
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Say whether the service is loaded and running, its pid, address, log and mounts",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServiceStatus(cmd.Context(), opts)
		},
	}
	status.Flags().BoolVar(&opts.JSON, "json", false, "print the status as JSON")
	logs := &cobra.Command{
		Use:   "logs",
		Short: "Print the server's log",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return serviceLogs(cmd.Context(), opts)
		},
	}
	logs.Flags().IntVarP(&opts.Lines, "lines", "n", 100, "print the last N lines")
	logs.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new lines")
	cmd.AddCommand(install, uninstall, status, logs)
	return cmd
}

// serviceBinary is the binary the service runs: --binary, else this one.
// A binary inside a Homebrew Cellar is replaced by its link in the
// prefix's bin, which survives upgrades.
func serviceBinary(o *serviceOptions) (string, error) {
	p := o.Binary
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("cannot find this binary's path (%v): give it with --binary", err)
		}
		p = exe
	}
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if i := strings.Index(p, "/Cellar/"); i > 0 {
		link := filepath.Join(p[:i], "bin", filepath.Base(p))
		if _, err := os.Stat(link); err == nil {
			p = link
		}
	}
	return p, nil
}

// writeServiceFile writes data to path atomically, creating its directory.
func writeServiceFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func runServiceInstall(ctx context.Context, o *serviceOptions) error {
	store, err := o.storeDir()
	if err != nil {
		return err
	}
	if o.Listen != "" {
		if err := checkListen(o.Listen, o.AllowRemote, o.stderr); err != nil {
			return err
		}
	}
	var mount, from string
	if o.Mount != "" {
		if mount, err = filepath.Abs(o.Mount); err != nil {
			return err
		}
	}
	if o.From != "" {
		if from, err = filepath.Abs(o.From); err != nil {
			return err
		}
	}
	bin, err := serviceBinary(o)
	if err != nil {
		return err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("cannot find your home directory (%v): set $HOME", err)
	}
	spec := serviceSpec{Binary: bin, Args: serveArgs(store, o.Listen, mount, from), LogDir: serviceLogDir(home)}
	if o.AllowRemote {
		spec.Args = append(spec.Args, "--allow-remote")
	}
	return serviceInstall(ctx, o, home, spec)
}

func runServiceUninstall(ctx context.Context, o *serviceOptions) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("cannot find your home directory (%v): set $HOME", err)
	}
	return serviceUninstall(ctx, o, home)
}

func runServiceStatus(ctx context.Context, o *serviceOptions) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("cannot find your home directory (%v): set $HOME", err)
	}
	st := collectServiceStatus(ctx, o, home)
	if o.JSON {
		return writeJSON(o.stdout, st)
	}
	printServiceStatus(o.stdout, st)
	return nil
}

// collectServiceStatus asks the service manager, the installed file, the
// server's control API and the mount table.
func collectServiceStatus(ctx context.Context, o *serviceOptions, home string) serviceStatus {
	st := serviceStatus{File: serviceFilePath(home), Log: serviceLogPath(home), Mounts: []string{}}
	if data, err := os.ReadFile(st.File); err == nil {
		st.Installed = true
		if args, err := serviceArgsOf(data); err == nil {
			st.Store, st.Listen = flagValue(args, "--store"), flagValue(args, "--listen")
		}
	}
	if st.Store == "" {
		st.Store, _ = o.storeDir()
	}
	ms := queryService(ctx)
	st.Loaded, st.Running, st.PID, st.State = ms.Loaded, ms.Running, ms.PID, ms.State
	answering := false
	port := 0
	if st.Store != "" {
		if c, cs, err := control.Dial(ctx, control.SocketPath(st.Store), dialTimeout); err == nil {
			c.Close()
			answering = true
			st.Listen, st.Version, port = cs.Listen, cs.Version, cs.Port
			if st.PID == 0 {
				st.PID = cs.PID
			}
		} else if si, err := readServeInfo(st.Store); err == nil {
			port = si.Port
			if st.Listen == "" {
				st.Listen = si.Listen
			}
		}
	}
	if port != 0 {
		st.Mounts = append(st.Mounts, existingMounts(port)...)
	}
	finishServiceStatus(&st, answering)
	return st
}

// finishServiceStatus sets StaleMounts and the hints; answering: the
// server answers on its control socket.
func finishServiceStatus(st *serviceStatus, answering bool) {
	st.StaleMounts = !answering && len(st.Mounts) > 0
	switch {
	case !st.Installed:
		st.Hints = append(st.Hints, "not installed: branchnfs service install [--store DIR] [--listen ADDR] [--mount DIR]")
	case !st.Running && !answering:
		st.Hints = append(st.Hints, "the service is not running: "+serviceStartHint+" (its log: branchnfs service logs)")
	}
	if st.StaleMounts {
		st.Hints = append(st.Hints, "the server is stopped but NFS mounts of it remain: programs that touch them hang or fail. Start the service again (the mounts reconnect), or unmount each: "+staleUnmountHint)
	}
}

// serviceArgsOf returns the serve arguments an installed unit or agent
// file runs.
func serviceArgsOf(data []byte) ([]string, error) {
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("<?xml")) {
		v, err := parsePlist(data)
		if err != nil {
			return nil, err
		}
		m, _ := v.(map[string]any)
		arr, _ := m["ProgramArguments"].([]any)
		var out []string
		for _, a := range arr {
			s, _ := a.(string)
			out = append(out, s)
		}
		return out, nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart="); ok {
			return splitSystemdCommand(rest)
		}
	}
	return nil, errors.New("no ExecStart line")
}

// flagValue returns the value of --name in args ("" if absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func printServiceStatus(w io.Writer, s serviceStatus) {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(w, "file:     %s (installed: %s)\n", s.File, yes(s.Installed))
	fmt.Fprintf(w, "loaded:   %s\n", yes(s.Loaded))
	run := yes(s.Running)
	if s.PID != 0 {
		run += fmt.Sprintf(", pid %d", s.PID)
	}
	fmt.Fprintf(w, "running:  %s (%s)\n", run, s.State)
	if s.Version != "" {
		fmt.Fprintf(w, "server:   branchnfs %s serving NFS on %s\n", s.Version, s.Listen)
	} else if s.Listen != "" {
		fmt.Fprintf(w, "address:  %s (no server answers)\n", s.Listen)
	}
	if s.Store != "" {
		fmt.Fprintf(w, "store:    %s\n", s.Store)
	}
	fmt.Fprintf(w, "log:      %s\n", s.Log)
	for _, m := range s.Mounts {
		fmt.Fprintf(w, "mount:    %s\n", m)
	}
	for _, h := range s.Hints {
		fmt.Fprintf(w, "hint:     %s\n", h)
	}
}

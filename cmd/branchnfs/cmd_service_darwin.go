package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// serviceStartHint and staleUnmountHint are the commands status suggests.
var (
	serviceStartHint = "launchctl kickstart gui/" + strconv.Itoa(os.Getuid()) + "/" + serviceLabel
)

const staleUnmountHint = "umount -f DIR (or diskutil unmount force DIR)"

// serviceFilePath is the launchd agent's plist.
func serviceFilePath(home string) string {
	return filepath.Join(home, "Library", "LaunchAgents", serviceLabel+".plist")
}

func serviceLogDir(home string) string { return filepath.Join(home, "Library", "Logs", "branchnfs") }

func serviceLogPath(home string) string { return filepath.Join(serviceLogDir(home), serviceLogName) }

// launchctl runs launchctl with args and returns its output.
func launchctl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "/bin/launchctl", args...).CombinedOutput()
	msg := strings.TrimSpace(string(out))
	if err != nil {
		return msg, fmt.Errorf("launchctl %s: %s (%v)", strings.Join(args, " "), msg, err)
	}
	return msg, nil
}

func guiDomain() string { return "gui/" + strconv.Itoa(os.Getuid()) }

func serviceInstall(ctx context.Context, o *serviceOptions, home string, spec serviceSpec) error {
	path := serviceFilePath(home)
	if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
		return fmt.Errorf("create the log directory: %w", err)
	}
	_, statErr := os.Stat(path)
	if err := writeServiceFile(path, launchdPlist(spec)); err != nil {
		return fmt.Errorf("write the agent: %w", err)
	}
	verb := "installed"
	if statErr == nil {
		verb = "updated"
	}
	fmt.Fprintf(o.stdout, "%s %s\n", verb, path)
	fmt.Fprintf(o.stdout, "runs: %s\n", shellJoin(append([]string{spec.Binary}, spec.Args...)))
	if o.NoStart {
		fmt.Fprintf(o.stdout, "not started (--no-start): launchctl bootstrap %s %s\n", guiDomain(), path)
		return nil
	}
	// A loaded agent keeps its old arguments: unload it first (an error
	// here means it was not loaded).
	launchctl(ctx, "bootout", guiDomain()+"/"+serviceLabel)
	if _, err := launchctl(ctx, "bootstrap", guiDomain(), path); err != nil {
		return fmt.Errorf("%w\nthe agent is written at %s; run this as the logged-in user, not over sudo", err, path)
	}
	if _, err := launchctl(ctx, "kickstart", "-k", guiDomain()+"/"+serviceLabel); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "started %s; it starts again at each login (branchnfs service status, branchnfs service logs)\n", serviceLabel)
	return nil
}

func serviceUninstall(ctx context.Context, o *serviceOptions, home string) error {
	path := serviceFilePath(home)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		fmt.Fprintf(o.stdout, "not installed (no %s)\n", path)
		return nil
	}
	if st := queryService(ctx); st.Loaded {
		if _, err := launchctl(ctx, "bootout", guiDomain()+"/"+serviceLabel); err != nil {
			return err
		}
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "stopped and removed %s (its log stays in %s)\n", path, serviceLogDir(filepath.Dir(filepath.Dir(filepath.Dir(path)))))
	return nil
}

var (
	launchdState = regexp.MustCompile(`(?m)^\s*state = (.+)$`)
	launchdPID   = regexp.MustCompile(`(?m)^\s*pid = (\d+)$`)
)

// queryService asks launchd about the agent.
func queryService(ctx context.Context) osServiceState {
	out, err := launchctl(ctx, "print", guiDomain()+"/"+serviceLabel)
	if err != nil {
		return osServiceState{State: "not loaded"}
	}
	s := osServiceState{Loaded: true, State: "loaded"}
	if m := launchdState.FindStringSubmatch(out); m != nil {
		s.State = strings.TrimSpace(m[1])
		s.Running = s.State == "running"
	}
	if m := launchdPID.FindStringSubmatch(out); m != nil {
		s.PID, _ = strconv.Atoi(m[1])
	}
	return s
}

func serviceLogs(ctx context.Context, o *serviceOptions) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	path := serviceLogPath(home)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no log at %s (%v): is the service installed? branchnfs service install", path, err)
	}
	args := []string{"-n", strconv.Itoa(o.Lines)}
	if o.Follow {
		args = append(args, "-F")
	}
	cmd := exec.CommandContext(ctx, "/usr/bin/tail", append(args, path)...)
	cmd.Stdout, cmd.Stderr = o.stdout, o.stderr
	return cmd.Run()
}

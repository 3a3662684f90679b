package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// serviceStartHint and staleUnmountHint are the commands status suggests.
const (
	serviceStartHint = "systemctl --user start " + serviceUnitName
	staleUnmountHint = "sudo umount -f -l DIR"
)

// serviceFilePath is the systemd --user unit: in $XDG_CONFIG_HOME, else
// ~/.config.
func serviceFilePath(home string) string {
	cfg := os.Getenv("XDG_CONFIG_HOME")
	if cfg == "" {
		cfg = filepath.Join(home, ".config")
	}
	return filepath.Join(cfg, "systemd", "user", serviceUnitName)
}

// serviceLogDir is unused on Linux: the journal keeps the log.
func serviceLogDir(home string) string { return "" }

func serviceLogPath(home string) string {
	return "journalctl --user -u " + serviceUnitName
}

// systemctl runs systemctl --user with args and returns its output.
func systemctl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "systemctl", append([]string{"--user"}, args...)...).CombinedOutput()
	msg := strings.TrimSpace(string(out))
	if err != nil {
		return msg, fmt.Errorf("systemctl --user %s: %s (%v)", strings.Join(args, " "), msg, err)
	}
	return msg, nil
}

// noUserManagerHint explains a systemctl --user that cannot reach the
// user's service manager.
const noUserManagerHint = `systemctl --user needs your user's systemd instance: log in through a
session that starts one (a desktop or ssh login, not su or sudo), or as root
run "loginctl enable-linger USER" once, then try again`

func serviceInstall(ctx context.Context, o *serviceOptions, home string, spec serviceSpec) error {
	path := serviceFilePath(home)
	_, statErr := os.Stat(path)
	if err := writeServiceFile(path, systemdUnit(spec)); err != nil {
		return fmt.Errorf("write the unit: %w", err)
	}
	verb := "installed"
	if statErr == nil {
		verb = "updated"
	}
	fmt.Fprintf(o.stdout, "%s %s\n", verb, path)
	fmt.Fprintf(o.stdout, "runs: %s\n", systemdCommand(append([]string{spec.Binary}, spec.Args...)))
	if o.NoStart {
		fmt.Fprintf(o.stdout, "not started (--no-start): systemctl --user daemon-reload && systemctl --user enable --now %s\n", serviceUnitName)
		return nil
	}
	for _, args := range [][]string{{"daemon-reload"}, {"enable", serviceUnitName}, {"restart", serviceUnitName}} {
		if _, err := systemctl(ctx, args...); err != nil {
			return fmt.Errorf("%w\nthe unit is written at %s; %s", err, path, noUserManagerHint)
		}
	}
	fmt.Fprintf(o.stdout, "started %s; it starts again at each login (branchnfs service status, branchnfs service logs)\n", serviceUnitName)
	if !lingering() {
		fmt.Fprintf(o.stdout, "to keep it running while you are logged out: loginctl enable-linger %s\n", currentUserName())
	}
	return nil
}

func serviceUninstall(ctx context.Context, o *serviceOptions, home string) error {
	path := serviceFilePath(home)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		fmt.Fprintf(o.stdout, "not installed (no %s)\n", path)
		return nil
	}
	// Stop first: the unit file must still be there for systemd to stop
	// the service by it.
	if _, err := systemctl(ctx, "disable", "--now", serviceUnitName); err != nil {
		return fmt.Errorf("%w\nthe unit is left at %s; %s", err, path, noUserManagerHint)
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	if _, err := systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "stopped and removed %s\n", path)
	return nil
}

// queryService asks systemd about the unit.
func queryService(ctx context.Context) osServiceState {
	out, err := systemctl(ctx, "show", serviceUnitName, "--property=LoadState,ActiveState,SubState,MainPID")
	if err != nil {
		return osServiceState{State: "unknown: " + err.Error()}
	}
	return parseSystemctlShow(out)
}

// parseSystemctlShow reads systemctl show's Key=Value lines.
func parseSystemctlShow(out string) osServiceState {
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			kv[k] = v
		}
	}
	var s osServiceState
	s.Loaded = kv["LoadState"] == "loaded"
	s.Running = kv["ActiveState"] == "active" || kv["ActiveState"] == "reloading"
	s.PID, _ = strconv.Atoi(kv["MainPID"])
	s.State = kv["ActiveState"]
	if sub := kv["SubState"]; sub != "" {
		s.State += " (" + sub + ")"
	}
	if s.State == "" {
		s.State = "unknown"
	}
	return s
}

func serviceLogs(ctx context.Context, o *serviceOptions) error {
	args := []string{"--user", "-u", serviceUnitName, "--no-pager", "-n", strconv.Itoa(o.Lines)}
	if o.Follow {
		args = append(args, "-f")
	}
	cmd := exec.CommandContext(ctx, "journalctl", args...)
	cmd.Stdout, cmd.Stderr = o.stdout, o.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("journalctl %s: %w (without a user journal, try: journalctl _SYSTEMD_USER_UNIT=%s)", strings.Join(args, " "), err, serviceUnitName)
	}
	return nil
}

// lingering reports whether the user's manager outlives their sessions.
func lingering() bool {
	name := currentUserName()
	_, err := os.Stat(filepath.Join("/var/lib/systemd/linger", name))
	return err == nil
}

func currentUserName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

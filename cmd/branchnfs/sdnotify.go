package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// sdNotify sends state (newline-separated VAR=value lines, such as
// "READY=1") to the service manager's socket in $NOTIFY_SOCKET, the
// sd_notify(3) protocol: one datagram on a unix socket, a path or, with a
// leading '@', an abstract name. Without $NOTIFY_SOCKET (not run by
// systemd with Type=notify) it does nothing.
func sdNotify(state string) error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return nil
	}
	if !strings.HasPrefix(sock, "/") && !strings.HasPrefix(sock, "@") {
		return fmt.Errorf("sd_notify: $NOTIFY_SOCKET %q is neither a path nor an abstract socket name", sock)
	}
	if strings.HasPrefix(sock, "@") {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	n, err := c.Write([]byte(state))
	if err == nil && n != len(state) {
		err = errors.New("short write")
	}
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// notifyService is sdNotify that logs a failure: the server runs on
// without the service manager's notice.
func notifyService(logger interface{ Warn(string, ...any) }, state string) {
	if err := sdNotify(state); err != nil {
		logger.Warn("cannot notify the service manager", "state", state, "err", err)
	}
}

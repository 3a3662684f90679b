package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
)

// defaultListen is the address serve listens on without --listen.
const defaultListen = "127.0.0.1:12049"

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// exportOf returns the export path for a branch name, or "/" (every
// branch) for "/".
func exportOf(name string) (string, error) {
	if name == "/" {
		return "/", nil
	}
	if !nameRE.MatchString(name) {
		return "", fmt.Errorf("%w: %q (names match [A-Za-z0-9._-]{1,64}; use / for the export of every branch)", branches.ErrInvalidName, name)
	}
	return control.ExportPath(name), nil
}

// mountArgs is the OS mount command (README, "Mount commands") for
// export on host:port at dir. goos is "darwin" or "linux".
func mountArgs(goos, host string, port int, export, dir string) ([]string, error) {
	p := strconv.Itoa(port)
	src := host + ":" + export
	if strings.Contains(host, ":") {
		src = "[" + host + "]:" + export
	}
	switch goos {
	case "darwin", "macos":
		// locallocks: no statd probe on port 111, working flock/fcntl locks.
		// soft+nobrowse: no "server connections interrupted" dialog.
		// noquota: no rquota lookups. nosuid,nodev: XNU adds them to a
		// user's mount, not to one made with sudo. rsize, wsize 1 MiB (the client's
		// default is 32 KiB), readahead 16 blocks of that size. docs/macos.md
		// explains each option.
		return []string{"/sbin/mount_nfs", "-o",
			"vers=3,tcp,port=" + p + ",mountport=" + p + ",locallocks,soft,intr,timeo=100,retrans=5,nobrowse,noquota,nosuid,nodev,rsize=1048576,wsize=1048576,readahead=16",
			src, dir}, nil
	case "linux":
		return []string{"mount", "-t", "nfs", "-o",
			"vers=3,proto=tcp,port=" + p + ",mountport=" + p + ",mountproto=tcp,nolock,noacl,nosuid,nodev,rsize=1048576,wsize=1048576,hard",
			src, dir}, nil
	}
	return nil, usagef("no mount command for OS %q (use --os darwin or --os linux)", goos)
}

// fstabLine is the /etc/fstab entry that lets a non-root user mount export
// on Linux.
func fstabLine(host string, port int, export, dir string) string {
	p := strconv.Itoa(port)
	return fmt.Sprintf("%s:%s %s nfs user,noauto,vers=3,proto=tcp,port=%s,mountport=%s,mountproto=tcp,nolock,noacl,nosuid,nodev,rsize=1048576,wsize=1048576,hard 0 0",
		host, export, dir, p, p)
}

// shellJoin quotes args for a POSIX shell.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%~", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// serveInfo is STORE/serve.json: where the server of this store listens
// (kept after it stops so `mount --print` works offline).
type serveInfo struct {
	Listen  string `json:"listen"`
	Port    int    `json:"port"`
	PID     int    `json:"pid"`
	Started string `json:"started"`
}

func readServeInfo(dir string) (serveInfo, error) {
	var si serveInfo
	b, err := os.ReadFile(filepath.Join(dir, serveFileName))
	if err != nil {
		return si, err
	}
	err = json.Unmarshal(b, &si)
	return si, err
}

// mountHost is the address a client mounts for a server listening on
// listen: the listen host, or 127.0.0.1 when it listens on every address.
func mountHost(listen string) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" || host == "localhost" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return host
}

type mountOptions struct {
	*globalOptions
	Print bool
	Port  int
	OS    string
	Name  string
	Dir   string
}

func newMountCommand(g *globalOptions) *cobra.Command {
	opts := &mountOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "mount NAME DIR",
		Short: "Mount branch NAME at DIR with the OS's NFS client (or print the command)",
		Long: `Mount branch NAME (export /NAME; use / for the export showing every live
branch) at DIR with the OS's NFS client, on the port of this store's server.

macOS: /sbin/mount_nfs, no sudo; you must own DIR.
Linux: mount -t nfs, which needs root or an /etc/fstab entry with "user".
--print prints the command instead of running it.`,
		Args: exactArgs("NAME", "DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Dir = args[0], args[1]
			return runMount(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func (o *mountOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.Print, "print", false, "print the mount command instead of running it")
	cmd.Flags().IntVar(&o.Port, "port", 0, "server port (default: the running server's, else the last one, else 12049)")
	cmd.Flags().StringVar(&o.OS, "os", runtime.GOOS, "print the command for this OS (darwin or linux)")
}

// serverAddr finds host and port of this store's server: the running
// server, else the address it last listened on, else the default.
func (o *mountOptions) serverAddr(ctx context.Context) (host string, port int, c *control.Client, err error) {
	dir, err := o.storeDir()
	if err != nil {
		return "", 0, nil, err
	}
	if c, st, err := control.Dial(ctx, control.SocketPath(dir), dialTimeout); err == nil {
		return mountHost(st.Listen), st.Port, c, nil
	} else if !errors.Is(err, control.ErrNoServer) {
		return "", 0, nil, err
	}
	if o.Port != 0 {
		return "127.0.0.1", o.Port, nil, nil
	}
	if si, err := readServeInfo(dir); err == nil && si.Port > 0 {
		fmt.Fprintf(o.stderr, "branchnfs: no server running on %s; using the port it last listened on (%d)\n", dir, si.Port)
		return mountHost(si.Listen), si.Port, nil, nil
	}
	_, p, _ := net.SplitHostPort(defaultListen)
	port, _ = strconv.Atoi(p)
	fmt.Fprintf(o.stderr, "branchnfs: no server running on %s; assuming the default port %d\n", dir, port)
	return "127.0.0.1", port, nil, nil
}

func runMount(ctx context.Context, o *mountOptions) error {
	export, err := exportOf(o.Name)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	host, port, c, err := o.serverAddr(ctx)
	if err != nil {
		return err
	}
	if c != nil {
		defer c.Close()
		if export != "/" {
			// Say now, not with a cryptic mount error, that the branch is gone.
			in, err := c.Get(ctx, o.Name)
			if err != nil {
				return err
			}
			if in.State != branches.StateLive {
				if in.InvalidatedBy != "" {
					return &branches.InvalidatedError{Branch: in.Name, By: in.InvalidatedBy}
				}
				return fmt.Errorf("%w: branch %q is %s", branches.ErrStale, in.Name, in.State)
			}
		}
	}
	if o.Port != 0 {
		port = o.Port
	}
	args, err := mountArgs(o.OS, host, port, export, dir)
	if err != nil {
		return err
	}
	if o.Print {
		fmt.Fprintln(o.stdout, shellJoin(args))
		return nil
	}
	if o.OS != runtime.GOOS {
		return usagef("--os %s only works with --print", o.OS)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: create mount point: %v", errMountFailed, err)
	}
	if err := runMountCommand(ctx, args, host, port, export, dir); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "mounted %s at %s\n", export, dir)
	return nil
}

type umountOptions struct {
	*globalOptions
	Dir string
}

func newUmountCommand(g *globalOptions) *cobra.Command {
	opts := &umountOptions{globalOptions: g}
	return &cobra.Command{
		Use:   "umount DIR",
		Short: "Unmount a branch mounted at DIR",
		Long: `Unmount DIR with umount. On macOS, fall back to "diskutil unmount force".
Unmount before stopping the server: a forced unmount flushes dirty pages
through the server.`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir = args[0]
			return runUmount(cmd.Context(), opts)
		},
	}
}

func runUmount(ctx context.Context, o *umountOptions) error {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	if err := runUmountCommand(ctx, dir, o.stderr); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "unmounted %s\n", dir)
	return nil
}

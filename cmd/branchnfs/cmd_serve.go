package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
)

type serveOptions struct {
	*globalOptions
	From        string
	Listen      string
	AllowRemote bool
	Sync        bool
	LogLevel    string
	Ignore      []string
	Reserve     string
	Mount       string
	Backend     backendFlags
	LeaseTTL    time.Duration
	AdaptProcs  bool
	S3          string // serve --s3 (cmd_s3.go)
	// WorkdirRoot: testing only, see attemptOptions.WorkdirRoot.
	WorkdirRoot string
}

func newServeCommand(g *globalOptions) *cobra.Command {
	opts := &serveOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve every live branch over NFSv3 (creating the store on first use)",
		Long: `Serve every live branch over NFSv3 and MOUNT v3 on one port: export /B is
branch B, export / shows every live branch as a directory. The store and
branch main are created on first use (--from DIR imports DIR into a new
store's main). The control API listens on STORE/control.sock; every request
needs the token in STORE/control.token (made once, mode 0600).

SIGINT or SIGTERM stops the server cleanly: requests in flight finish, the
store is synced and closed. Unmount clients first.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func (o *serveOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.From, "from", "", "import this directory into main when the store is created")
	cmd.Flags().StringVar(&o.Listen, "listen", defaultListen, "NFS address host:port (port 0 picks a free port)")
	cmd.Flags().BoolVar(&o.AllowRemote, "allow-remote", false, "allow a --listen address other than loopback")
	cmd.Flags().BoolVar(&o.Sync, "sync", false, "make every write durable against power loss before acknowledging it")
	cmd.Flags().StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	addIgnoreFlag(cmd, &o.Ignore)
	cmd.Flags().StringVar(&o.Mount, "mount", "", "mount the export / at this directory, for exec, race and best-of (macOS: as you; Linux: as root or through an /etc/fstab \"user\" entry)")
	cmd.Flags().StringVar(&o.WorkdirRoot, "workdir-root", "", "testing only: jobs run in DIR/BRANCH, a plain directory, instead of the mount")
	cmd.Flags().MarkHidden("workdir-root")
	o.Backend.AddFlags(cmd)
	cmd.Flags().DurationVar(&o.LeaseTTL, "lease-ttl", 10*time.Second, "with --meta etcd: how long after this server stops answering its branches can be taken over by another server (whole seconds)")
	cmd.Flags().BoolVar(&o.AdaptProcs, "adapt-procs", true, "use one processor while NFS calls arrive one at a time (less CPU for a client walking or untarring a tree), all of them once calls overlap; off when GOMAXPROCS is set")
	cmd.Flags().StringVar(&o.S3, "s3", "", "also serve the live branches over S3 on host:port (a bucket is a branch; loopback unless --allow-remote; see branchnfs s3 credentials)")
	cmd.Flags().StringVar(&o.Reserve, "reserve", "512MiB", "free space to keep on the store's disk: writes fail with ENOSPC before they would use it (0 disables the check; Badger then dies with SIGBUS on a full disk)")
}

// checkListen refuses a non-loopback address unless allowRemote, and warns
// when it is allowed.
func checkListen(listen string, allowRemote bool, stderr io.Writer) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return usagef("--listen %q: %v", listen, err)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	if loopback {
		return nil
	}
	if !allowRemote {
		return usagef("--listen %q is not a loopback address; branchnfs has no authentication, so add --allow-remote if you really want other machines to reach every branch", listen)
	}
	fmt.Fprintf(stderr, "branchnfs: WARNING: listening on %s: any machine that reaches this address can read and write every branch (no authentication)\n", listen)
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// serveMemoryLimit is the server's soft heap limit unless GOMEMLIMIT says
// otherwise (our target is 300 MiB of RSS, mmapped files included: docs/benchmarks.md).
const serveMemoryLimit = 256 << 20

func runServe(ctx context.Context, o *serveOptions) (err error) {
	if err := checkListen(o.Listen, o.AllowRemote, o.stderr); err != nil {
		return err
	}
	if err := checkS3Flag(o); err != nil {
		return err
	}
	level, err := parseLevel(o.LogLevel)
	if err != nil {
		return err
	}
	ignore, err := ignoreList(o.Ignore)
	if err != nil {
		return err
	}
	reserve, err := parseSize(o.Reserve)
	if err != nil {
		return usagef("--reserve: %v", err)
	}
	if reserve == 0 {
		reserve = -1 // kv: no reserve
	}
	backend, err := o.Backend.config()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(o.stderr, &slog.HandlerOptions{Level: level}))
	// What still logs to the default logger (libraries) follows --log-level.
	prevLogger := slog.Default()
	slog.SetDefault(logger)
	defer slog.SetDefault(prevLogger)
	logger.Info("branchnfs starting", "version", versionInfo().String(), "pid", os.Getpid())
	if os.Getenv("GOMEMLIMIT") == "" {
		// Badger's memtables and caches are most of the heap; a soft limit
		// makes the collector run before garbage doubles it.
		debug.SetMemoryLimit(serveMemoryLimit)
	}
	dir, err := o.storeDir()
	if err != nil {
		return err
	}
	sock := control.SocketPath(dir)
	if _, st, err := control.Dial(ctx, sock, dialTimeout); err == nil {
		return fmt.Errorf("%w: a server (pid %d) already serves %s on %s", errStoreBusy, st.PID, dir, st.Listen)
	}
	fresh := !storeExists(dir)
	pending := importPending(dir)
	_, statErr := os.Stat(dir)
	dirExisted := statErr == nil
	start := time.Now()
	s, err := openStore(ctx, dir, openOptions{create: true, syncWrites: o.Sync, reserve: reserve, logger: logger, ignore: ignore, backend: backend, serve: true, leaseTTL: o.LeaseTTL})
	if err != nil {
		return err
	}
	if w := s.readOnlyWarning(); w != "" {
		fmt.Fprintln(o.stderr, w)
	}
	defer func() {
		if s == nil {
			return
		}
		if cerr := s.Close(); cerr != nil {
			logger.Error("close store", "err", cerr)
			if err == nil {
				err = fmt.Errorf("close store: %w", cerr)
			}
		}
	}()
	if fresh {
		fmt.Fprintf(o.stderr, "branchnfs: created store %s with branch main\n", dir)
	}
	redo, err := recoverImport(ctx, s, o.stderr)
	if err != nil {
		return err
	}
	if o.From != "" {
		if fresh || (pending && redo) {
			if err := importIntoMain(ctx, s, o.From, o.stderr); err != nil {
				// Leave no half-made store behind: the next serve --from
				// would otherwise ignore --from.
				if fresh {
					s.Close()
					s = nil
					removeNewStore(dir, dirExisted)
				}
				return err
			}
		} else {
			fmt.Fprintf(o.stderr, "branchnfs: store %s already exists; ignoring --from %s\n", dir, o.From)
		}
	}

	// The folder main was imported from, for the status (which is read
	// from memory; a later import --update through the server may change it).
	var sourceDir atomic.Pointer[string]
	if d, err := s.mgr.SourceDir(ctx); err != nil {
		logger.Warn("cannot read the source folder; apply will need --to", "err", err)
	} else {
		sourceDir.Store(&d)
	}

	// GOMAXPROCS in the environment is the user's choice of processors.
	adapt := o.AdaptProcs && os.Getenv("GOMAXPROCS") == ""
	nfs, err := nfsserver.New(nfsserver.Options{Branches: s.mgr, Logger: logger, AllowUIDs: allowedUIDs(dir), AdaptProcs: adapt})
	if err != nil {
		return err
	}
	// The control socket first: once the NFS port accepts connections, a
	// script's next command (mount --print, fork) finds the server.
	token, err := control.EnsureToken(dir)
	if err != nil {
		return err
	}
	cln, err := control.Listen(sock)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		cln.Close()
		return fmt.Errorf("listen on %s: %w", o.Listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	started := time.Now()
	status := control.Status{
		Version: versionInfo().Version, PID: os.Getpid(), Store: dir,
		Listen: addr.String(), Port: addr.Port, Started: started.UTC(),
		Ignore: s.mgr.Ignore(),
	}
	var mounted atomic.Pointer[string] // serve --mount, once mounted
	ctl, err := control.NewServer(control.ServerOptions{
		Backend:   s.mgr,
		Token:     token,
		TokenFile: control.TokenPath(dir),
		Status: func() control.Status {
			st := status
			st.NFS = nfs.Metrics()
			if m := mounted.Load(); m != nil {
				st.Mount = *m
			}
			if d := sourceDir.Load(); d != nil {
				st.SourceDir = *d
			}
			st.HeapLive = heapLive()
			st.Branches = s.mgr.Metrics()
			return st
		},
		Logger:       logger,
		Runner:       jobRunner(o, s.mgr, dir, &mounted, logger),
		InUse:        nfs.BranchUsers,
		Mounts:       mcpMount(logger),
		ImportUpdate: serverImportUpdate(s, &sourceDir, logger),
	})
	if err != nil {
		ln.Close()
		cln.Close()
		return err
	}
	s3srv, err := startS3(o, dir, s.mgr, logger)
	if err != nil {
		ln.Close()
		cln.Close()
		return err
	}
	if err := writeServeInfo(dir, serveInfo{Listen: addr.String(), Port: addr.Port, PID: os.Getpid(), Started: started.UTC().Format(time.RFC3339)}); err != nil {
		logger.Warn("cannot record the listen address", "err", err)
	}

	// The banner is out before either server answers (the sockets already
	// listen), so whoever waits for the API finds it printed.
	printBanner(ctx, o.stdout, s.mgr, dir, sock, addr, time.Since(start), o.Mount)
	s3srv.banner(o.stdout)
	if d := s.backend.describe(); d != "" {
		fmt.Fprintln(o.stdout, d)
	}
	for _, m := range existingMounts(addr.Port) {
		// Handles survive restarts, so such a mount carries on; say so, as
		// a mount point left over from a crash is otherwise a mystery.
		fmt.Fprintf(o.stdout, "existing mount from an earlier run (it reconnects to this server): %s\n", m)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := nfs.Serve(gctx, ln); err != nil && !errors.Is(err, nfsserver.ErrServerClosed) {
			return fmt.Errorf("nfs server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := ctl.Serve(gctx, cln); err != nil {
			return fmt.Errorf("control server: %w", err)
		}
		return nil
	})
	g.Go(s3srv.serve)
	// systemd (Type=notify): ready once the NFS port listens.
	notifyService(logger, "READY=1\nSTATUS=serving NFS on "+addr.String())
	unmount := func() {}
	if o.Mount != "" {
		var m string
		m, unmount = serveMount(gctx, o.Mount, mountHost(addr.String()), addr.Port, logger, o.stderr)
		mounted.Store(&m)
	}

	// Both servers return when ctx is cancelled (SIGINT/SIGTERM) or when one
	// of them fails; then close the other one too.
	g.Go(func() error {
		<-gctx.Done()
		notifyService(logger, "STOPPING=1")
		// Closing the API first ends its jobs (fence, kill), so that no
		// attempt keeps the mount busy when it is unmounted.
		ctl.Close()
		s3srv.close()
		unmount()
		warnMounted(o.stderr, nfs.Mounts())
		nfs.Close()
		return nil
	})
	werr := g.Wait()
	fmt.Fprintln(o.stderr, "branchnfs: stopping: syncing and closing the store")
	if werr != nil {
		return werr
	}
	return nil // a signal is a clean stop
}

func writeServeInfo(dir string, si serveInfo) error {
	b, err := json.MarshalIndent(si, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, serveFileName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, serveFileName))
}

// printBanner prints where the server listens and how to mount the live
// branches, or, when the server mounts the export / itself (serve
// --mount), where they are.
func printBanner(ctx context.Context, w io.Writer, mgr *branches.Manager, dir, sock string, addr *net.TCPAddr, took time.Duration, mountDir string) {
	host := mountHost(addr.String())
	fmt.Fprintf(w, "branchnfs %s serving %s on %s (ready in %s)\n", versionInfo().Version, dir, addr, took.Round(time.Millisecond))
	fmt.Fprintf(w, "control API: curl --unix-socket %s -H \"Authorization: Bearer $(cat %s)\" http://branchnfs/v1/status\n",
		shellQuote(sock), shellQuote(control.TokenPath(dir)))
	goos := runtime.GOOS
	mnt := func(export, name string) string {
		args, err := mountArgs(goos, host, addr.Port, export, mountPointHint(goos, name))
		if err != nil {
			return err.Error()
		}
		return shellJoin(args)
	}
	if mountDir != "" {
		mnt = func(export, name string) string { return name + ": " + filepath.Join(mountDir, name) }
		fmt.Fprintf(w, "mounting every branch (export /) at %s\n", mountDir)
	} else {
		fmt.Fprintf(w, "mount every branch (export /):\n  %s\n", mnt("/", "all"))
	}
	infos, err := mgr.List(ctx)
	if err != nil {
		fmt.Fprintf(w, "cannot list branches: %v\n", err)
		return
	}
	var live []string
	for _, in := range infos {
		if in.State == branches.StateLive && !strings.HasPrefix(in.Name, importPrefix) {
			live = append(live, in.Name)
		}
	}
	const maxShown = 10
	fmt.Fprintf(w, "live branches (%d):\n", len(live))
	for i, name := range live {
		if i == maxShown {
			fmt.Fprintf(w, "  ... and %d more (branchnfs list; branchnfs mount NAME DIR --print)\n", len(live)-maxShown)
			break
		}
		fmt.Fprintf(w, "  %s\n", mnt(control.ExportPath(name), name))
	}
}

// mountPointHint is the example mount point the banner shows.
func mountPointHint(goos, name string) string {
	if goos == "darwin" {
		return "~/.branchnfs/mnt/" + name // outside TCC-protected folders
	}
	return "/mnt/branchnfs/" + name
}

// heapLive returns the bytes of Go heap the last garbage collection kept.
func heapLive() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

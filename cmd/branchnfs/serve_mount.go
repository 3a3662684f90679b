package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/attempt/runner"
)

// serveMount mounts the export / of the server on port at dir with the OS's
// NFS client (serve --mount), so that attempts can run in dir/BRANCH. It
// returns the absolute mount point and a function that unmounts it. A
// failed mount is reported and the server goes on without one.
func serveMount(ctx context.Context, dir, host string, port int, logger *slog.Logger, stderr io.Writer) (string, func()) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		err = os.MkdirAll(abs, 0o755)
	}
	if err == nil {
		err = mountRoot(ctx, host, port, abs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "branchnfs: WARNING: cannot mount the export / at %s; exec, race and best-of will exit 13 until / is mounted: %v\n", dir, err)
		return "", func() {}
	}
	fmt.Fprintf(stderr, "branchnfs: mounted the export / at %s\n", abs)
	return abs, func() {
		// Attempts' dirty pages are flushed by their runner; an unmount
		// flushes the rest while the server still answers.
		uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := runUmountCommand(uctx, abs, stderr); err != nil {
			logger.Warn("cannot unmount the export /", "dir", abs, "err", err)
		}
	}
}

// jobRunner is how the server runs the attempts of API jobs: in the mount
// it made (serve --mount), or nil when it makes none.
func jobRunner(o *serveOptions, mgr runner.Backend, store string, mounted *atomic.Pointer[string], logger *slog.Logger) *runner.Options {
	if o.Mount == "" && o.WorkdirRoot == "" {
		return nil
	}
	ro := &runner.Options{Backend: mgr, Store: store, Logger: logger}
	logDir := filepath.Join(store, "attempts")
	if err := os.MkdirAll(logDir, 0o700); err == nil {
		ro.LogDir = logDir
	}
	if o.WorkdirRoot != "" {
		root, _ := filepath.Abs(o.WorkdirRoot)
		ro.Workdir = func(branch string) (string, error) {
			d := filepath.Join(root, branch)
			return d, os.MkdirAll(d, 0o755)
		}
		return ro
	}
	ro.Workdir = func(branch string) (string, error) {
		m := mounted.Load()
		if m == nil || *m == "" {
			return "", fmt.Errorf("%w: the server could not mount the export / at %s (see its log)", errMountFailed, o.Mount)
		}
		return branchDir(*m, branch)
	}
	return ro
}

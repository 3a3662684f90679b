package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
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

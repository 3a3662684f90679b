package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe raises a pipe's capacity to 1 MiB, the most an unprivileged
// process may ask for by default (/proc/sys/fs/pipe-max-size). Failure
// leaves the default 64 KiB, which only costs the writer more wake-ups.
func growPipe(f *os.File) {
	unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, 1<<20)
}

package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/branchnfs/branchnfs/cowfs/importdir"
)

// importProgress displays import progress: one live line, rewritten in
// place, on a terminal; a plain line every few seconds otherwise.
type importProgress struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	last     time.Time
	shown    bool
	line     func(importdir.Progress) string // what a line says
}

func newImportProgress(w io.Writer) *importProgress {
	p := &importProgress{w: w, interval: 5 * time.Second, line: progressLine}
	if f, ok := w.(*os.File); ok && isTerminal(f.Fd()) {
		p.tty, p.interval = true, 100*time.Millisecond
	}
	return p
}

func progressLine(p importdir.Progress) string {
	return fmt.Sprintf("imported %d files, %d dirs, %d symlinks, %d hard links, %s",
		p.Files, p.Dirs, p.Symlinks, p.HardLinks, humanBytes(p.Bytes))
}

// update is the importdir.Options.Progress callback.
func (ip *importProgress) update(p importdir.Progress) {
	now := time.Now()
	if now.Sub(ip.last) < ip.interval {
		return
	}
	ip.last = now
	if ip.tty {
		line := ip.line(p) + "  " + p.Path
		if len(line) > 110 {
			line = line[:110]
		}
		fmt.Fprintf(ip.w, "\r\033[K%s", line)
		ip.shown = true
		return
	}
	fmt.Fprintln(ip.w, ip.line(p))
}

// finish clears the live line, if any.
func (ip *importProgress) finish() {
	if ip.tty && ip.shown {
		fmt.Fprint(ip.w, "\r\033[K")
		ip.shown = false
	}
}

// done prints the final line.
func (ip *importProgress) done(p importdir.Progress, took time.Duration) {
	if ip.tty && ip.shown {
		fmt.Fprint(ip.w, "\r\033[K")
	}
	fmt.Fprintf(ip.w, "%s in %s\n", progressLine(p), took.Round(time.Millisecond))
}

//go:build !linux

package main

import (
	"fmt"
	"runtime"
)

// run refuses: the helper only makes sense inside the Linux test guest.
func run(args []string) error {
	return fmt.Errorf("runs only inside the Linux test guest, not on %s", runtime.GOOS)
}

package main

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// hasNosuidNodev reports whether a Linux mount command or fstab line
// mounts with nosuid and nodev: files on a branch must not become set-uid
// programs or device nodes on the client.
func hasNosuidNodev(line string) bool {
	for _, f := range strings.Fields(line) {
		opts := strings.Split(f, ",")
		if len(opts) > 1 && contains(opts, "nosuid") && contains(opts, "nodev") {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestLinuxMountLinesNosuidNodev checks every Linux mount command and fstab
// line that branchnfs prints or runs: mount --print, the fstab hint, and the
// serve banner.
func TestLinuxMountLinesNosuidNodev(t *testing.T) {
	var lines []string
	for _, export := range []string{"/", "/b1"} {
		args, err := mountArgs("linux", "127.0.0.1", 12049, export, "/mnt/x")
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, shellJoin(args))
		lines = append(lines, fstabLine("127.0.0.1", 12049, export, "/mnt/x"))
	}
	_, store := fakeServer(t, 23456)
	code, out, _ := runCLI(t, "mount", "/", "/mnt/all", "--print", "--os", "linux", "--store", store)
	if code != 0 {
		t.Fatalf("mount --print: exit %d", code)
	}
	lines = append(lines, strings.TrimSpace(out))

	if runtime.GOOS == "linux" {
		// The banner of a real serve prints this OS's commands.
		st := filepath.Join(shortTempDir(t), "s")
		if code, _, _ := runCLI(t, "init", "--store", st); code != 0 {
			t.Fatal(code)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var o, e testbin.SyncBuffer
		done := make(chan int)
		go func() { done <- run(ctx, []string{"serve", "--store", st, "--listen", "127.0.0.1:0"}, &o, &e) }()
		for started := false; !started; {
			select {
			case code := <-done:
				cancel()
				t.Fatalf("serve exited: %d\n%s%s", code, o.String(), e.String())
			default:
			}
			// The banner is complete once it printed the mount commands of
			// export / and of main; the control socket answers before that.
			if out := o.String(); strings.Contains(out, "live branches") && strings.Count(out, "mount -t nfs") >= 2 {
				started = true
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
		cancel()
		<-done
		n := 0
		for _, l := range strings.Split(o.String(), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "mount -t nfs") {
				lines = append(lines, l)
				n++
			}
		}
		if n < 2 { // export / and branch main
			t.Fatalf("serve banner has %d mount commands:\n%s", n, o.String())
		}
	}
	for _, l := range lines {
		if !hasNosuidNodev(l) {
			t.Errorf("Linux mount line without nosuid,nodev: %s", l)
		}
	}
}

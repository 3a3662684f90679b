package kernel

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// The guest reports over its second serial port (ttyS1), which qemu connects
// to a unix socket the test listens on. Lines from the guest:
//
//	READY                     booted, modules loaded, network up
//	STEP name PASS|FAIL text  one scenario step finished
//	HOST action [args]        asks the test to act (fork, commit, restart the
//	                          server...); the test answers "OK action" or
//	                          "ERR action message" on the same port
//	DONE                      scenario finished; the guest powers off next
//
// The kernel console (ttyS0) goes to a log file that failing tests print.

// guestInit is /init of the initramfs. Module names come from guestModules.
const guestInit = `#!/bin/busybox sh
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
for m in %s; do
	if [ -f /lib/modules/$m.ko ]; then insmod /lib/modules/$m.ko || echo "init: insmod $m failed"; fi
done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
stty -F /dev/ttyS1 raw -echo
exec 3<>/dev/ttyS1
. /env.sh
. /lib.sh
report READY
. /scenario.sh
report DONE
sync
reboot -f
`

// guestLib holds the shell helpers every scenario uses.
const guestLib = `
report() { echo "$*" >&3; }

# step NAME CMD...: runs CMD in a subshell and reports PASS or FAIL with the
# last lines of its output, as $STEP_PREFIX$NAME. CMD fails by exiting
# non-zero (see fail).
step() {
	_name=$1; shift
	_out=$( "$@" 2>&1 ); _rc=$?
	_detail=$(printf '%s' "$_out" | tail -n 6 | tr '\n\r\t' '|  ' | cut -c1-600)
	_name=$STEP_PREFIX$_name
	if [ $_rc -eq 0 ]; then report "STEP $_name PASS $_detail"; else report "STEP $_name FAIL rc=$_rc $_detail"; fi
}
fail() { echo "FAIL: $*"; exit 1; }
# expect_eq GOT WANT WHAT
expect_eq() { [ "$1" = "$2" ] || fail "$3: got '$1', want '$2'"; }
# expect_err WANTTEXT CMD...: CMD must fail and its error text contain WANTTEXT.
expect_err() {
	_want=$1; shift
	_eout=$( "$@" 2>&1 ) && fail "'$*' succeeded, want failure '$_want' (output: $_eout)"
	case "$_eout" in *"$_want"*) echo "ok: '$*' -> $_eout";; *) fail "'$*' failed with '$_eout', want '$_want'";; esac
}
# host ACTION [ARGS]: the test performs ACTION on the host.
host() {
	report "HOST $*"
	read -r _reply <&3
	case "$_reply" in "OK $1"*) return 0;; *) echo "host $*: $_reply"; return 1;; esac
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# nfsmount EXPORT DIR [EXTRA_OPTIONS]: MOUNT_OPTS are the options that
# "branchnfs mount --print --os linux" gives; mount(2) also needs the
# addresses that mount.nfs would otherwise resolve.
nfsmount() {
	mkdir -p "$2"
	_opts=${MOUNT_OPTS:-vers=3,proto=tcp,port=$NFS_PORT,mountport=$NFS_PORT,mountproto=tcp,nolock,noacl}
	/bin/mounthelper mount "10.0.2.2:$1" "$2" "$_opts,mountvers=3,addr=10.0.2.2,mountaddr=10.0.2.2${3:+,$3}"
}
# as_user CMD...: runs a shell command line as the unprivileged user alice.
as_user() { /bin/mounthelper runas 1000 1000 /bin/sh -c "$*"; }
`

// stepRE finds the step names a scenario script declares, in order.
var stepRE = regexp.MustCompile(`(?m)^\s*step\s+([A-Za-z0-9_]+)\s`)

// oracleRE finds the body of a scenario's posix_steps function, whose steps
// also run on the guest's tmpfs, reported as tmpfs/NAME.
var oracleRE = regexp.MustCompile(`(?ms)^posix_steps\(\) \{\n(.*?)^\}`)

// oracleSteps lists the steps a scenario runs on tmpfs as an oracle.
func oracleSteps(script string) []string {
	m := oracleRE.FindStringSubmatch(script)
	if m == nil {
		return nil
	}
	return scenarioSteps(m[1])
}

func scenarioSteps(script string) []string {
	var names []string
	for _, m := range stepRE.FindAllStringSubmatch(script, -1) {
		names = append(names, m[1])
	}
	return names
}

type stepResult struct {
	seq    int // order of arrival
	pass   bool
	detail string
	took   time.Duration
	// cpu is the CPU time, in seconds, each watched process had used when
	// the line arrived (see bootGuest's watch), nil when nothing is watched.
	cpu map[string]float64
}

type bootResult struct {
	boot    time.Duration          // qemu start to READY
	total   time.Duration          // qemu start to exit
	steps   map[string]*stepResult // by step name
	ready   map[string]float64     // CPU times at READY, as stepResult.cpu
	console string                 // path of the kernel console log
	err     error                  // harness-level failure (timeout, qemu died...)
}

// stepIdleTimeout bounds the time between two lines from the guest: boot,
// or one step. The slowest step (rm -rf of 3,000 files) takes about 20 s
// on an idle 2-core machine and over a minute on a loaded one.
const stepIdleTimeout = 240 * time.Second

// hostAction performs one HOST request of the guest.
type hostAction func(args []string) error

// guestFile is an extra file of the initramfs: Src on the host, Path in
// the guest (no leading slash).
type guestFile struct{ Path, Src string }

// bootGuest boots the guest with script as /scenario.sh and serves its
// requests until it powers off or the timeout passes. With watch (a name
// for each process id), every step's result records the CPU time each of
// those processes, qemu ("qemu") and all the host's CPUs ("host") had used
// when its line arrived (see cpuSample).
func bootGuest(t testing.TB, img *guestImage, helper, script string, env map[string]string, actions map[string]hostAction, watch map[string]int, timeout time.Duration, files ...guestFile) *bootResult {
	t.Helper()
	dir := t.TempDir()
	res := &bootResult{steps: map[string]*stepResult{}, console: filepath.Join(dir, "console.log")}

	helperBin, err := os.ReadFile(helper)
	if err != nil {
		res.err = err
		return res
	}
	var envSh strings.Builder
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&envSh, "%s='%s'\n", k, env[k])
	}
	var c cpioWriter
	c.file("init", 0o755, []byte(fmt.Sprintf(guestInit, strings.Join(guestModules, " "))))
	c.file("lib.sh", 0o644, []byte(guestLib))
	c.file("env.sh", 0o644, []byte(envSh.String()))
	c.file("scenario.sh", 0o644, []byte(script))
	c.file("bin/mounthelper", 0o755, helperBin)
	for _, f := range files {
		b, err := os.ReadFile(f.Src)
		if err != nil {
			res.err = err
			return res
		}
		c.file(f.Path, 0o755, b)
	}
	c.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:alice:/tmp:/bin/sh\n"))
	c.file("etc/group", 0o644, []byte("root:x:0:\nalice:x:1000:\n"))
	base, err := os.ReadFile(img.baseGz)
	if err != nil {
		res.err = err
		return res
	}
	for _, l := range img.layers {
		b, err := os.ReadFile(l)
		if err != nil {
			res.err = err
			return res
		}
		base = append(base, b...)
	}
	initrd := filepath.Join(dir, "initrd")
	if err := os.WriteFile(initrd, append(base, c.finish()...), 0o644); err != nil {
		res.err = err
		return res
	}

	sock := filepath.Join(dir, "ctl.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		res.err = err
		return res
	}
	defer ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-machine", "q35,accel=tcg", "-smp", "1", "-m", "1024",
		// Named threads: the vCPU's ("CPU 0/TCG") CPU time tells the
		// guest's own work from qemu's devices and network.
		"-name", "guest,debug-threads=on",
		"-display", "none", "-monitor", "none", "-no-reboot",
		"-kernel", img.kernel, "-initrd", initrd,
		"-nic", "user,model=e1000",
		"-serial", "file:"+res.console,
		"-serial", "unix:"+sock,
		"-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/init")
	var qemuOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qemuOut, &qemuOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		res.err = fmt.Errorf("start qemu: %w", err)
		return res
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	connc := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			connc <- conn
		}
	}()
	var conn net.Conn
	select {
	case conn = <-connc:
	case err := <-exited:
		res.err = fmt.Errorf("qemu exited before connecting its serial port: %v: %s", err, qemuOut.String())
		return res
	}
	defer conn.Close()

	lines := make(chan string)
	stopReading := make(chan struct{})
	defer close(stopReading)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			select {
			case lines <- strings.TrimRight(sc.Text(), "\r"):
			case <-stopReading:
				return
			}
		}
	}()

	sample := func() map[string]float64 { return nil }
	if watch != nil {
		procs := map[string]int{"qemu": cmd.Process.Pid}
		for name, pid := range watch {
			procs[name] = pid
		}
		sample = func() map[string]float64 { return cpuSample(procs) }
	}
	last := start
	done := false
	// A step that hangs (a hard NFS mount retries forever) must not eat the
	// whole budget: give up when the guest is silent for too long.
	idle := time.NewTimer(stepIdleTimeout)
	defer idle.Stop()
	for lines != nil {
		select {
		case <-idle.C:
			res.err = fmt.Errorf("guest silent for %v (a step hangs?); killed it", stepIdleTimeout)
			cmd.Process.Kill()
			lines = nil
		case line, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			now := time.Now()
			idle.Reset(stepIdleTimeout)
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			switch f[0] {
			case "READY":
				res.boot = now.Sub(start)
				res.ready = sample()
				last = now
			case "STEP":
				if len(f) < 3 {
					t.Logf("guest: malformed line %q", line)
					continue
				}
				detail := ""
				if len(f) > 3 {
					detail = strings.Join(f[3:], " ")
				}
				res.steps[f[1]] = &stepResult{seq: len(res.steps), pass: f[2] == "PASS", detail: detail, took: now.Sub(last), cpu: sample()}
				last = now
			case "HOST":
				reply := "OK " + strings.Join(f[1:], " ")
				var act hostAction
				if len(f) >= 2 {
					act = actions[f[1]]
				}
				if act == nil {
					reply = fmt.Sprintf("ERR %s no such host action", strings.Join(f[1:], " "))
				} else {
					t0 := time.Now()
					err := act(f[2:])
					t.Logf("host action %q for the guest: %v in %v", strings.Join(f[1:], " "), err, time.Since(t0).Round(time.Millisecond))
					if err != nil {
						reply = fmt.Sprintf("ERR %s %s", f[1], strings.ReplaceAll(err.Error(), "\n", " | "))
					}
				}
				if _, err := conn.Write([]byte(reply + "\n")); err != nil {
					res.err = fmt.Errorf("answer guest: %w", err)
				}
			case "DONE":
				done = true
				// The guest powers off next; do not wait for a hung one.
				time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
			default:
				t.Logf("guest: %s", line)
			}
		case <-ctx.Done():
			res.err = fmt.Errorf("guest did not finish within %v", timeout)
			cmd.Process.Kill()
			lines = nil
		}
	}
	werr := <-exited
	res.total = time.Since(start)
	if res.err == nil && !done {
		res.err = fmt.Errorf("guest stopped before DONE (qemu: %v): %s", werr, tail(qemuOut.String(), 10))
	}
	return res
}

// consoleTail returns the end of the guest's kernel console log.
func (r *bootResult) consoleTail(n int) string {
	b, err := os.ReadFile(r.console)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}

package kernel

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The benchmark's step times are wall-clock times on the host, and the
// guest is a TCG emulator: everything it does (the programs, the kernel's
// NFS client, its network card) runs on host CPUs that the servers also
// use. To tell a slow server from a busy host, the benchmark records the
// CPU time the servers, qemu and the whole host used during each step.

// userHZ is the unit of the CPU times in /proc (USER_HZ, 100 on every
// Linux architecture Go supports).
const userHZ = 100

// cpuSample returns the CPU time, in seconds, each of procs (a name for
// each process id) has used so far (user plus system, every thread), and
// as "host" the time all the host's CPUs spent busy (neither idle nor
// waiting for I/O). A process that cannot be read is left out. For qemu,
// it also returns its threads' times summed by thread name, as
// "qemu/NAME": the vCPU thread ("CPU 0/TCG") runs the guest, the main
// thread its devices and user-mode network; and as "qemu-wait/NAME" the
// time they were ready to run but waited for a host CPU (schedstat).
func cpuSample(procs map[string]int) map[string]float64 {
	out := make(map[string]float64, len(procs)+1)
	for name, pid := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if v, err := procStatCPU(string(b)); err == nil {
			out[name] = v
		}
		if name == "qemu" {
			threadCPU(pid, name, out)
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		if v, err := hostBusyCPU(string(b)); err == nil {
			out["host"] = v
		}
	}
	return out
}

// threadCPU adds the CPU time of each of pid's threads to out, summed by
// thread name, as prefix/NAME, and the time they waited on a run queue
// as prefix-wait/NAME.
func threadCPU(pid int, prefix string, out map[string]float64) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		comm, err1 := os.ReadFile(dir + "/" + e.Name() + "/comm")
		b, err2 := os.ReadFile(dir + "/" + e.Name() + "/stat")
		if err1 != nil || err2 != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		if v, err := procStatCPU(string(b)); err == nil {
			out[prefix+"/"+name] += v
		}
		if ss, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat"); err == nil {
			if f := strings.Fields(string(ss)); len(f) >= 2 {
				if ns, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					out[prefix+"-wait/"+name] += float64(ns) / 1e9
				}
			}
		}
	}
}

// procStatCPU returns utime + stime, in seconds, of a /proc/PID/stat line.
// The fields after the command name (which may hold spaces and
// parentheses) start with the state; utime and stime are the 14th and
// 15th fields of the line.
func procStatCPU(line string) (float64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat %q: no command name", line)
	}
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat %q: too few fields", line)
	}
	u, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat utime: %w", err)
	}
	s, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat stime: %w", err)
	}
	return float64(u+s) / userHZ, nil
}

// hostBusyCPU returns the seconds all CPUs of /proc/stat's "cpu" line
// spent neither idle nor in iowait (user, nice, system, irq, softirq,
// steal; guest time is already part of user).
func hostBusyCPU(stat string) (float64, error) {
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var busy uint64
		for i, v := range f[1:9] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat cpu line: %w", err)
			}
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return float64(busy) / userHZ, nil
	}
	return 0, fmt.Errorf("/proc/stat has no cpu line")
}

// cpuDelta returns b - a for every name in both.
func cpuDelta(a, b map[string]float64) map[string]float64 {
	if a == nil || b == nil {
		return nil
	}
	d := make(map[string]float64, len(b))
	for k, v := range b {
		if u, ok := a[k]; ok {
			d[k] = v - u
		}
	}
	return d
}

func TestProcStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, utime 250, stime 75.
	line := "4242 (ganesha (x) d) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 12 0 100 2000000 3000 18446744073709551615\n"
	got, err := procStatCPU(line)
	if err != nil || got != 3.25 {
		t.Errorf("procStatCPU = %v, %v; want 3.25 s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 u 5 0"} {
		if _, err := procStatCPU(bad); err == nil {
			t.Errorf("procStatCPU(%q) succeeded", bad)
		}
	}
	// This process's CPU time grows as it works (in ticks of 10 ms).
	procs := map[string]int{"self": os.Getpid(), "gone": -1}
	s := cpuSample(procs)
	first := s["self"]
	sum := sha256.Sum256(nil)
	for i := 0; i < 1e7 && s["self"] == first; i++ {
		sum = sha256.Sum256(sum[:])
		if i%1000 == 0 {
			s = cpuSample(procs)
		}
	}
	if s["self"] <= first || s["host"] <= 0 {
		t.Errorf("cpuSample = %v: want self and host above 0", s)
	}
	if _, ok := s["self"]; !ok {
		t.Errorf("cpuSample = %v: no self", s)
	}
	// The threads of a test binary are named after it; their times
	// (CPU and run-queue wait) are summed under that name.
	q := map[string]float64{}
	threadCPU(os.Getpid(), "p", q)
	exe, _ := os.ReadFile("/proc/self/comm")
	name := strings.TrimSpace(string(exe))
	if _, ok := q["p/"+name]; !ok || len(q) != 2 || q["p-wait/"+name] < 0 {
		t.Errorf("threadCPU = %v: want p/%s and p-wait/%[2]s", q, name)
	}
	if _, ok := s["gone"]; ok {
		t.Errorf("cpuSample reported a process that does not exist: %v", s)
	}
}

func TestHostBusyCPU(t *testing.T) {
	stat := "cpu  100 5 50 9000 300 7 3 2 40 0\ncpu0 50 2 25 4500 150 3 1 1 20 0\nintr 1\n"
	got, err := hostBusyCPU(stat)
	if err != nil || got != 1.67 { // 100+5+50+7+3+2 ticks, without idle 9000 and iowait 300
		t.Errorf("hostBusyCPU = %v, %v; want 1.67 s", got, err)
	}
	if _, err := hostBusyCPU("cpu0 1 2 3 4 5 6 7 8\n"); err == nil {
		t.Errorf("hostBusyCPU without a cpu line succeeded")
	}
	d := cpuDelta(map[string]float64{"a": 1, "b": 2}, map[string]float64{"a": 1.5, "c": 9})
	if len(d) != 1 || d["a"] != 0.5 {
		t.Errorf("cpuDelta = %v, want a: 0.5 only", d)
	}
}

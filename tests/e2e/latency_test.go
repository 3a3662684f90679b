package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// BenchmarkBranchOps measures fork, commit (into an unchanged parent) and
// abort as a user or script sees them: through the control API of a
// running server, through the CLI talking to that server, and through the
// CLI opening the store itself (no server). It reports p50 and p99 in µs.
//
//	go test ./tests/e2e -run '^$' -bench BranchOps -benchtime 200x
func BenchmarkBranchOps(b *testing.B) {
	dir, err := os.MkdirTemp("", "bnfsb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store := filepath.Join(dir, "s")
	srv := startBenchServer(b, store)
	defer srv.Process.Kill()
	ctx := context.Background()
	cl, _, err := control.Dial(ctx, control.SocketPath(store), 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()

	apiOps := map[string]func(name string) error{
		"fork":   func(n string) error { _, err := cl.Fork(ctx, "main", n); return err },
		"commit": func(n string) error { _, err := cl.Commit(ctx, n); return err },
		"abort":  func(n string) error { _, err := cl.Abort(ctx, n); return err },
	}
	cliOp := func(store string) func(args ...string) error {
		return func(args ...string) error {
			out, err := exec.Command(binPath, append(args, "--store", store)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
	}
	run := func(b *testing.B, prep, op func(name string) error) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("b%d-%d", time.Now().UnixNano(), i)
			if prep != nil {
				b.StopTimer()
				if err := prep(name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			start := time.Now()
			if err := op(name); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	fork := apiOps["fork"]
	for _, mode := range []string{"api", "cli-server", "cli-direct"} {
		var do func(op, name string) error
		switch mode {
		case "api":
			do = func(op, name string) error { return apiOps[op](name) }
		case "cli-server":
			c := cliOp(store)
			do = func(op, name string) error {
				if op == "fork" {
					return c("fork", "main", name)
				}
				return c(op, name)
			}
		case "cli-direct":
			dstore := filepath.Join(dir, "direct")
			c := cliOp(dstore)
			if err := c("init"); err != nil {
				b.Fatal(err)
			}
			do = func(op, name string) error {
				if op == "fork" {
					return c("fork", "main", name)
				}
				return c(op, name)
			}
		}
		prepFork := func(name string) error { return do("fork", name) }
		if mode == "api" || mode == "cli-server" {
			prepFork = fork
		}
		b.Run(mode+"/fork", func(b *testing.B) { run(b, nil, func(n string) error { return do("fork", n) }) })
		b.Run(mode+"/commit", func(b *testing.B) { run(b, prepFork, func(n string) error { return do("commit", n) }) })
		b.Run(mode+"/abort", func(b *testing.B) { run(b, prepFork, func(n string) error { return do("abort", n) }) })
	}
}

// startBenchServer starts `branchnfs serve` for a benchmark.
func startBenchServer(b *testing.B, store string) *exec.Cmd {
	cmd := exec.Command(binPath, "serve", "--store", store, "--listen", "127.0.0.1:0", "--log-level", "warn")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, _, err := control.Dial(context.Background(), control.SocketPath(store), time.Second)
		if err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			b.Fatalf("server did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

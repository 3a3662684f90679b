package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/branchnfs/branchnfs/bench/branchops"
	"github.com/branchnfs/branchnfs/bench/nfsclient"
	"github.com/branchnfs/branchnfs/bench/stats"
	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// soakRow is the state of the server after a number of soak rounds, with
// the latencies of the rounds since the previous row.
type soakRow struct {
	Rounds     int     `json:"rounds"`
	Live       int     `json:"live_branches"`
	RSS        int64   `json:"rss_bytes"`
	RssAnon    int64   `json:"rss_anon_bytes"`
	RssFile    int64   `json:"rss_file_bytes"`
	HeapLive   int64   `json:"heap_live_bytes"` // Go heap kept by the server's last GC
	StoreBytes int64   `json:"store_bytes"`     // allocated blocks under the store directory
	ForkUS     float64 `json:"fork_p50_us"`
	WriteUS    float64 `json:"write_p50_us"` // LOOKUP + CREATE + WRITE 4 KiB FILE_SYNC
	CommitUS   float64 `json:"commit_p50_us"`
	AbortUS    float64 `json:"abort_p50_us"`
}

// soak runs cfg.SoakRounds rounds of fork → write 4 KiB over NFS → commit
// every 4th, else abort, against a real server process, and records a row
// every cfg.SoakEvery rounds. Memory that grows with the rounds, although
// one branch at most is live, shows as RSS growing from row to row.
func (s *suite) soak(ctx context.Context) {
	if err := s.soakRun(ctx); err != nil {
		s.fail("soak", err)
	}
}

func (s *suite) soakRun(ctx context.Context) error {
	n, every := s.cfg.SoakRounds, s.cfg.SoakEvery
	s.logf("soak: %d rounds, a row every %d", n, every)
	store, _, err := s.newStore("soak", 100)
	if err != nil {
		return err
	}
	defer os.RemoveAll(store)
	srv, err := startBranchnfs(s.bnfs, store, filepath.Join(s.tmp, "branchnfs-soak.log"))
	if err != nil {
		return err
	}
	defer srv.stop()
	c, _, err := control.Dial(ctx, control.SocketPath(store), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	// One connection on the synthetic root "/", as a client that mounted
	// every branch: each round looks its branch up by name.
	t := srv.target("")
	t.Export = "/"
	nc, err := nfsclient.Dial(t)
	if err != nil {
		return err
	}
	defer nc.Close()
	data := workload.Data(7, 4096)
	var fork, write, commit, abort []time.Duration
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("s%d", i)
		t0 := time.Now()
		if _, err := c.Fork(ctx, "main", name); err != nil {
			return fmt.Errorf("round %d: fork: %w", i, err)
		}
		t1 := time.Now()
		fork = append(fork, t1.Sub(t0))
		dir, _, err := nc.Lookup(nc.Root, name)
		if err != nil {
			return fmt.Errorf("round %d: lookup %s: %w", i, name, err)
		}
		fh, err := nc.Create(dir, fmt.Sprintf("f%d.bin", i), 0o644)
		if err != nil {
			return fmt.Errorf("round %d: create: %w", i, err)
		}
		if err := nc.WriteFull(fh, 0, data, nfsclient.FileSync); err != nil {
			return fmt.Errorf("round %d: write: %w", i, err)
		}
		t2 := time.Now()
		write = append(write, t2.Sub(t1))
		if i%4 == 0 {
			if _, err := c.Commit(ctx, name); err != nil {
				return fmt.Errorf("round %d: commit: %w", i, err)
			}
			commit = append(commit, time.Since(t2))
		} else {
			if _, err := c.Abort(ctx, name); err != nil {
				return fmt.Errorf("round %d: abort: %w", i, err)
			}
			abort = append(abort, time.Since(t2))
		}
		if i%every != 0 && i != n {
			continue
		}
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		_, rss, anon, file := srv.memory()
		size, err := branchops.DirSize(store)
		if err != nil {
			return err
		}
		p50 := func(ds []time.Duration) float64 { return stats.Summarize(stats.Micros(ds)).Median }
		row := soakRow{Rounds: i, Live: st.LiveBranches, RSS: rss, RssAnon: anon, RssFile: file, HeapLive: st.HeapLive, StoreBytes: size,
			ForkUS: p50(fork), WriteUS: p50(write), CommitUS: p50(commit), AbortUS: p50(abort)}
		s.res.Soak = append(s.res.Soak, row)
		s.logf("soak: %d rounds: RSS %.1f MiB (anon %.1f, files %.1f), live heap %.1f MiB, store %.1f MiB, p50 fork %s write %s commit %s abort %s",
			i, mib(rss), mib(anon), mib(file), mib(st.HeapLive), mib(size), us(row.ForkUS), us(row.WriteUS), us(row.CommitUS), us(row.AbortUS))
		fork, write, commit, abort = fork[:0], write[:0], commit[:0], abort[:0]
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

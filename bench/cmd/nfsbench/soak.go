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

// The soak's target: no growth with the rounds once the server is warm.
// RSS is not flat row to row: Badger's block cache fills (a few KiB a
// round here, up to its bound), a memtable's arena is paged in as it
// fills, a flush or a GC holds buffers for a while that the runtime gives
// back slowly, and the store's mapped files grow with the garbage of
// aborted branches until the reclaimer's GC gives it back
// (docs/benchmarks.md, Soak). So the rows judged start at the first one at
// or after soakFrom rounds whose store is smaller than the row before's
// (the reclaimer's first GC ran), or at soakFrom if the store never
// shrank; past it the lowest RSS of the later half of the rounds is
// within soakFlatMiB of the lowest of the earlier half. The lowest, not
// the highest: a row taken while a flush or a GC holds its buffers is
// tens of MiB above the rows around it, while every cycle comes back down
// to about the same floor, and memory kept per ended branch raises that
// floor by what the rounds between the two halves kept (over 10,000 rounds
// with a row every 1,000, about 5,000 rounds' worth: 2.1 KiB a round
// reaches 10 MiB). With fewer than soakMinRows rows to judge, the run was
// too short to tell.
const (
	soakFrom    = 1200
	soakFlatMiB = 10
	soakMinRows = 4
)

// soakJudgement is the soak's target applied to its rows.
type soakJudgement struct {
	From        soakRow // the first row judged
	Warm        bool    // From is the first after the store shrank
	Rows        int     // rows judged
	Early, Late soakRow // the lowest RSS of the earlier and the later half
	Grew        float64 // MiB from Early's RSS to Late's
	Judged      bool    // at least soakMinRows rows
	OK          bool    // judged, and Grew at most soakFlatMiB
}

// soakVerdict judges rows by the soak's target.
func soakVerdict(rows []soakRow) soakJudgement {
	var j soakJudgement
	from := -1
	for i, x := range rows {
		if x.Rounds < soakFrom {
			continue
		}
		if from < 0 {
			from = i
		}
		if i > 0 && x.StoreBytes < rows[i-1].StoreBytes {
			from, j.Warm = i, true
			break
		}
	}
	if from < 0 {
		return j
	}
	past := rows[from:]
	j.From, j.Rows = past[0], len(past)
	if len(past) < soakMinRows {
		return j
	}
	j.Judged = true
	mid := (past[0].Rounds + past[len(past)-1].Rounds) / 2
	for _, x := range past {
		if x.Rounds <= mid {
			if j.Early.Rounds == 0 || x.RSS < j.Early.RSS {
				j.Early = x
			}
		} else if j.Late.Rounds == 0 || x.RSS < j.Late.RSS {
			j.Late = x
		}
	}
	j.Grew = mib(j.Late.RSS - j.Early.RSS)
	j.OK = j.Grew <= soakFlatMiB
	return j
}

// soakRow is the state of the server after a number of soak rounds, with
// the latencies of the rounds since the previous row.
type soakRow struct {
	Rounds     int     `json:"rounds"`
	Live       int     `json:"live_branches"`
	RSS        int64   `json:"rss_bytes"`
	PeakRSS    int64   `json:"peak_rss_bytes"` // VmHWM: the highest RSS since the server started
	RssAnon    int64   `json:"rss_anon_bytes"`
	RssFile    int64   `json:"rss_file_bytes"`
	HeapLive   int64   `json:"heap_live_bytes"` // Go heap kept by the server's last GC
	StoreBytes int64   `json:"store_bytes"`     // allocated blocks under the store directory
	ForkUS     float64 `json:"fork_p50_us"`
	WriteUS    float64 `json:"write_p50_us"` // MNT, connect, CREATE + WRITE 4 KiB FILE_SYNC
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
	// Each round mounts its branch on a connection of its own and never
	// unmounts, as nfs-cp does: so the commit or abort is forced, and
	// what the server keeps of a mount or a connection must go with the
	// branch.
	t := srv.target("")
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
		t.Export = "/" + name
		nc, err := nfsclient.Dial(t)
		if err != nil {
			return fmt.Errorf("round %d: mount %s: %w", i, name, err)
		}
		fh, err := nc.Create(nc.Root, fmt.Sprintf("f%d.bin", i), 0o644)
		if err == nil {
			err = nc.WriteFull(fh, 0, data, nfsclient.FileSync)
		}
		nc.Close()
		if err != nil {
			return fmt.Errorf("round %d: create and write: %w", i, err)
		}
		t2 := time.Now()
		write = append(write, t2.Sub(t1))
		if i%4 == 0 {
			if _, err := c.ForceCommit(ctx, name); err != nil {
				return fmt.Errorf("round %d: commit: %w", i, err)
			}
			commit = append(commit, time.Since(t2))
		} else {
			if _, err := c.ForceAbort(ctx, name); err != nil {
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
		hwm, rss, anon, file := srv.memory()
		size, err := branchops.DirSize(store)
		if err != nil {
			return err
		}
		p50 := func(ds []time.Duration) float64 { return stats.Summarize(stats.Micros(ds)).Median }
		row := soakRow{Rounds: i, Live: st.LiveBranches, RSS: rss, PeakRSS: hwm, RssAnon: anon, RssFile: file, HeapLive: st.HeapLive, StoreBytes: size,
			ForkUS: p50(fork), WriteUS: p50(write), CommitUS: p50(commit), AbortUS: p50(abort)}
		s.res.Soak = append(s.res.Soak, row)
		s.logf("soak: %d rounds: RSS %.1f MiB (anon %.1f, files %.1f, peak %.1f), live heap %.1f MiB, store %.1f MiB, p50 fork %s write %s commit %s abort %s",
			i, mib(rss), mib(anon), mib(file), mib(hwm), mib(st.HeapLive), mib(size), us(row.ForkUS), us(row.WriteUS), us(row.CommitUS), us(row.AbortUS))
		fork, write, commit, abort = fork[:0], write[:0], commit[:0], abort[:0]
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

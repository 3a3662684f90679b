package main

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/branchnfs/branchnfs/bench/stats"
)

// BranchFS's published figures, in microseconds.
var branchFSRef = map[string]string{
	"fork":         "~300 µs",
	"commit 1KB":   "317 µs",
	"commit 100KB": "514 µs",
	"commit 1MB":   "2.1 ms",
	"commit 100MB": "—",
	"abort":        "~300–900 µs",
}

// targetUS is our p50 target per operation, in microseconds (docs/benchmarks.md).
var targetUS = map[string]float64{"fork": 100, "commit": 1000, "abort": 1000}

// memTargetMiB is the server's peak RSS target in every phase.
const memTargetMiB = 300

func us(v float64) string {
	switch {
	case v == 0 || math.IsNaN(v):
		return "—"
	case v >= 1e6:
		return fmt.Sprintf("%.2f s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2f ms", v/1e3)
	default:
		return fmt.Sprintf("%.0f µs", v)
	}
}

func p50p99(s stats.Summary) string {
	if s.N == 0 {
		return "—"
	}
	return us(s.Median) + " / " + us(s.P99)
}

func num(v float64) string {
	switch {
	case v == 0:
		return "—"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

// mmm renders median (min–max).
func mmm(s stats.Summary) string {
	if s.N == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.Median), num(s.Min), num(s.Max))
}

func ratio(a, b stats.Summary) string {
	if a.N == 0 || b.N == 0 || b.Median == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a.Median/b.Median)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// renderMarkdown prints every table and the list of missed targets.
func renderMarkdown(r *Results) string {
	var b strings.Builder
	var missed []string
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	mode := "full"
	if r.Config.Quick {
		mode = "quick"
	}
	p("# branchnfs benchmark (%s run)\n\n", mode)
	p("%s, commit %s, %d CPUs, %s; %d runs per figure (median (min–max)); %.0f s total; load average %s at the start, %s at the end.\n\n",
		r.Date, r.Commit, r.CPUs, r.GoVer, r.Config.Runs, r.Duration, r.LoadStart, r.LoadEnd)

	// 1. Branch operations.
	if len(r.BranchOpsInProcess)+len(r.BranchOpsAPI) > 0 {
		p("## 1. Branch operations (p50 / p99)\n\n")
		p("| operation | base files | in-process | control API | target p50 | BranchFS | verdict (in-process p50) |\n|---|---|---|---|---|---|---|\n")
		api := map[int]apiOpsResult{}
		for _, a := range r.BranchOpsAPI {
			api[a.BaseFiles] = a
		}
		bases := []int{}
		seen := map[int]bool{}
		for _, x := range r.BranchOpsInProcess {
			bases, seen[x.BaseFiles] = append(bases, x.BaseFiles), true
		}
		for _, a := range r.BranchOpsAPI {
			if !seen[a.BaseFiles] {
				bases = append(bases, a.BaseFiles)
			}
		}
		inproc := map[int]int{}
		for i, x := range r.BranchOpsInProcess {
			inproc[x.BaseFiles] = i
		}
		for _, op := range []string{"fork", "commit 1KB", "commit 100KB", "commit 1MB", "commit 100MB", "abort"} {
			for _, base := range bases {
				var ip, ap stats.Summary
				if i, ok := inproc[base]; ok {
					x := r.BranchOpsInProcess[i]
					switch op {
					case "fork":
						ip = x.Fork
					case "abort":
						ip = x.Abort
					default:
						ip = x.Commit[strings.TrimPrefix(op, "commit ")]
					}
				}
				a := api[base]
				switch op {
				case "fork":
					ap = a.Fork
				case "abort":
					ap = a.Abort
				default:
					ap = a.Commit[strings.TrimPrefix(op, "commit ")]
				}
				if ip.N == 0 && ap.N == 0 {
					continue
				}
				tgt := targetUS[strings.Fields(op)[0]]
				v := "—"
				if ip.N > 0 {
					ok := ip.Median < tgt
					v = verdict(ok)
					if !ok {
						missed = append(missed, fmt.Sprintf("%s p50 in-process at %d files: %s (target < %s)", op, base, us(ip.Median), us(tgt)))
					}
				}
				p("| %s | %d | %s | %s | < %s | %s | %s |\n", op, base, p50p99(ip), p50p99(ap), us(tgt), branchFSRef[op], v)
			}
		}
		p("\n")
		for _, a := range r.BranchOpsAPI {
			if a.CLIFork.N > 0 || a.ImportS > 0 {
				p("- base %d: `branchnfs init --from` import %.2f s; `branchnfs fork` via the CLI (process start included) p50 %s.\n", a.BaseFiles, a.ImportS, us(a.CLIFork.Median))
			}
		}
		for _, x := range r.BranchOpsInProcess {
			var parts []string
			for _, cs := range []string{"1KB", "100KB", "1MB", "100MB"} {
				if v, ok := x.CommitSynced[cs]; ok && v.N > 0 {
					parts = append(parts, fmt.Sprintf("%s %s", cs, p50p99(v)))
				}
			}
			p("- base %d: in-process population %.2f s; commit p50 / p99 when the branch's data was synced before the timer started: %s.\n", x.BaseFiles, x.PopulateS, strings.Join(parts, ", "))
		}
		p("\n")
	}
	if len(r.GoTestBench) > 0 {
		p("`go test -bench 'Fork/files=(100|10000)$|Commit|Abort' -benchtime 20x -count 5 ./branches/` (medians over the 5 counts):\n\n| benchmark | ns/op | p50 | p99 |\n|---|---|---|---|\n")
		names := make([]string, 0, len(r.GoTestBench))
		for k := range r.GoTestBench {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			m := r.GoTestBench[k]
			p("| %s | %s | %s | %s |\n", k, us(m["ns/op"].Median/1e3), us(m["p50-µs"].Median), us(m["p99-µs"].Median))
		}
		p("\n")
	}

	// 2. Throughput.
	if len(r.Seq) > 0 {
		p("## 2. Sequential throughput, %d MiB file (MiB/s, checksums verified)\n\n", r.Config.SeqMiB)
		p("| server | client | write | write vs ganesha | read | read vs ganesha | verified runs |\n|---|---|---|---|---|---|---|\n")
		ref := map[string]seqRow{}
		for _, s := range r.Seq {
			if strings.HasPrefix(s.Server, "nfs-ganesha") {
				ref[s.Client] = s
			}
		}
		for _, s := range r.Seq {
			g := ref[s.Client]
			extra := ""
			if s.Error != "" {
				extra = " (error: " + shorten(s.Error) + ")"
			}
			p("| %s | %s | %s | %s | %s | %s | %d%s |\n", s.Server, s.Client, mmm(s.Write), ratio(s.Write, g.Write), mmm(s.Read), ratio(s.Read, g.Read), s.Verified, extra)
			if strings.HasPrefix(s.Server, "branchnfs") && !strings.Contains(s.Server, "in-process") && (g.Write.N > 0 || g.Read.N > 0) {
				for _, x := range []struct {
					what   string
					a, ref stats.Summary
				}{{"write", s.Write, g.Write}, {"read", s.Read, g.Read}} {
					if x.a.N == 0 && (x.ref.N == 0 || strings.Contains(s.Server, "inherited")) {
						continue // read-only row
					}
					if x.a.N == 0 || x.a.Median < x.ref.Median {
						missed = append(missed, fmt.Sprintf("sequential %s, %s, %s: %s MiB/s vs ganesha %s (%s)", x.what, s.Server, s.Client, num(x.a.Median), num(x.ref.Median), ratio(x.a, x.ref)))
					}
				}
			}
		}
		p("\n")
		var cpuRows []seqRow
		var gcpu stats.Summary
		for _, s := range r.Seq {
			if s.ReadCPU.N > 0 {
				cpuRows = append(cpuRows, s)
				if strings.HasPrefix(s.Server, "nfs-ganesha") {
					gcpu = s.ReadCPU
				}
			}
		}
		if len(cpuRows) > 0 {
			var gself stats.Summary
			for _, s := range cpuRows {
				if strings.HasPrefix(s.Server, "nfs-ganesha") {
					gself = s.ClientCPU
				}
			}
			p("Server CPU time per GiB read (user + system of the server process over the read phase, Go client; lower is better, and it depends far less on the machine's load than MiB/s), and the Go client's own (the benchmark process over the same phase: what receiving that server's replies cost it):\n\n")
			p("| server | CPU ms per GiB read | × ganesha's | client CPU ms per GiB | × ganesha's client's |\n|---|---|---|---|---|\n")
			for _, s := range cpuRows {
				p("| %s | %s | %s | %s | %s |\n", s.Server, mmm(s.ReadCPU), ratio(s.ReadCPU, gcpu), mmm(s.ClientCPU), ratio(s.ClientCPU, gself))
			}
			p("\n")
		}
		seqClientSys(p, r.Seq)
	}

	// 3. Metadata.
	if len(r.Meta) > 0 {
		p("## 3. Metadata, %d files of 1 KiB, %d workers (operations/s)\n\n", r.Config.MetaFiles, r.Config.MetaWorkers)
		p("| server | create | stat (LOOKUP) | list (entries/s) | remove | vs ganesha (create / stat / list / remove) |\n|---|---|---|---|---|---|\n")
		var g metaRow
		for _, m := range r.Meta {
			if strings.HasPrefix(m.Server, "nfs-ganesha") {
				g = m
			}
		}
		for _, m := range r.Meta {
			extra := ""
			if m.Error != "" {
				extra = " (error: " + shorten(m.Error) + ")"
			}
			p("| %s | %s | %s | %s | %s | %s / %s / %s / %s%s |\n", m.Server, mmm(m.Create), mmm(m.Stat), mmm(m.List), mmm(m.Remove),
				ratio(m.Create, g.Create), ratio(m.Stat, g.Stat), ratio(m.List, g.List), ratio(m.Remove, g.Remove), extra)
			if strings.HasPrefix(m.Server, "branchnfs") && g.Create.N > 0 {
				for _, x := range []struct {
					what   string
					a, ref stats.Summary
				}{{"create", m.Create, g.Create}, {"stat", m.Stat, g.Stat}, {"list", m.List, g.List}, {"remove", m.Remove, g.Remove}} {
					if x.a.N == 0 || x.a.Median < x.ref.Median {
						missed = append(missed, fmt.Sprintf("metadata %s: %s ops/s vs ganesha %s (%s)", x.what, num(x.a.Median), num(x.ref.Median), ratio(x.a, x.ref)))
					}
				}
			}
		}
		p("\n")
		if g.CreateCPU.N > 0 {
			p("Server CPU time per operation (user + system of the server process over each phase, µs per file; per entry for list; lower is better, and it depends far less on the machine's load than operations/s):\n\n")
			p("| server | create | stat | list | remove | × ganesha's (create / stat / list / remove) |\n|---|---|---|---|---|---|\n")
			for _, m := range r.Meta {
				if m.CreateCPU.N == 0 {
					continue
				}
				p("| %s | %s | %s | %s | %s | %s / %s / %s / %s |\n", m.Server, mmm(m.CreateCPU), mmm(m.StatCPU), mmm(m.ListCPU), mmm(m.RemoveCPU),
					ratio(m.CreateCPU, g.CreateCPU), ratio(m.StatCPU, g.StatCPU), ratio(m.ListCPU, g.ListCPU), ratio(m.RemoveCPU, g.RemoveCPU))
			}
			p("\n")
		}
	}

	// 4. Storage.
	if len(r.Storage) > 0 {
		p("## 4. Storage growth on a 32 MiB file (store size after compaction + sync)\n\n")
		p("| workload | store before | store after | bytes added | MiB added | target | LayerFS | verdict |\n|---|---|---|---|---|---|---|---|\n")
		for _, s := range r.Storage {
			if row, ok := churnRow(s); ok {
				p("%s", row.md)
				if !row.met {
					missed = append(missed, row.missed)
				}
				continue
			}
			tgt, ref := 0.225, "0.225 MiB"
			if s.Workload == "Prepend" || s.Workload == "PrependKept" {
				tgt, ref = 0.0256, "0.0256 MiB"
			}
			ok := s.AddedMiB < tgt
			if !ok {
				missed = append(missed, fmt.Sprintf("storage %s: %.4f MiB added (target < %g MiB)", s.Workload, s.AddedMiB, tgt))
			}
			p("| %s | %d | %d | %d | %.4f | < %g MiB | %s | %s |\n", s.Workload, s.BaseBytes, s.AfterBytes, s.AddedBytes, s.AddedMiB, tgt, ref, verdict(ok))
		}
		p("\n")
	}

	// 5. Memory.
	if len(r.Memory) > 0 {
		p("## 5. branchnfs server memory (VmHWM)\n\n| phase | peak RSS | at the end: anonymous / mmapped files | target | verdict |\n|---|---|---|---|---|\n")
		for _, m := range r.Memory {
			mib := float64(m.PeakRSS) / (1 << 20)
			ok := mib < memTargetMiB
			if !ok && !strings.HasPrefix(m.Phase, "baseline") {
				missed = append(missed, fmt.Sprintf("server memory during %s: %.0f MiB (target < %d MiB)", m.Phase, mib, memTargetMiB))
			}
			p("| %s | %.0f MiB | %.0f / %.0f MiB | < %d MiB | %s |\n", m.Phase, mib, float64(m.RssAnon)/(1<<20), float64(m.RssFile)/(1<<20), memTargetMiB, verdict(ok))
		}
		p("\n")
	}

	// 6. Soak.
	if len(r.Soak) > 0 {
		p("## 6. Soak: fork → write 4 KiB over NFS → commit every 4th, else abort\n\n")
		p("| rounds | live branches | RSS | anonymous / mmapped files | peak RSS so far | live Go heap | store on disk | p50 fork | p50 write | p50 commit | p50 abort |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		lo, hi := r.Soak[0], r.Soak[0]
		for _, x := range r.Soak {
			p("| %d | %d | %.1f MiB | %.1f / %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %s | %s | %s | %s |\n", x.Rounds, x.Live, mib(x.RSS),
				mib(x.RssAnon), mib(x.RssFile), mib(x.PeakRSS), mib(x.HeapLive), mib(x.StoreBytes), us(x.ForkUS), us(x.WriteUS), us(x.CommitUS), us(x.AbortUS))
			if x.Rounds >= soakFrom && (lo.Rounds < soakFrom || x.RSS < lo.RSS) {
				lo = x
			}
			if x.Rounds >= soakFrom && (hi.Rounds < soakFrom || x.RSS > hi.RSS) {
				hi = x
			}
		}
		switch j := soakVerdict(r.Soak); {
		case j.Judged:
			if !j.OK {
				missed = append(missed, fmt.Sprintf("soak: lowest RSS of the later rounds %+.1f MiB over that of the earlier ones (%d and %d rounds; target at most +%d MiB)", j.Grew, j.Late.Rounds, j.Early.Rounds, soakFlatMiB))
			}
			why := fmt.Sprintf("the first row at or after %d rounds; the store never shrank", soakFrom)
			if j.Warm {
				why = "the first row after the store shrank: the reclaimer's first GC"
			}
			p("\nJudged from %d rounds (%s), %d rows. Lowest RSS: %.1f MiB after %d rounds in the earlier half, %.1f MiB after %d in the later: %+.1f MiB (target at most +%d MiB): %s. ",
				j.From.Rounds, why, j.Rows, mib(j.Early.RSS), j.Early.Rounds, mib(j.Late.RSS), j.Late.Rounds, j.Grew, soakFlatMiB, verdict(j.OK))
			p("Range past %d rounds: %.1f MiB (after %d) to %.1f MiB (after %d).\n", soakFrom, mib(lo.RSS), lo.Rounds, mib(hi.RSS), hi.Rounds)
		case j.Rows > 0:
			missed = append(missed, fmt.Sprintf("soak: %d rows from %d rounds, too few to tell growth from warm-up (want %d): run more rounds", j.Rows, j.From.Rounds, soakMinRows))
			p("\nNot judged: %d rows from %d rounds, want %d (run more rounds). Range past %d rounds: %.1f MiB (after %d) to %.1f MiB (after %d).\n",
				j.Rows, j.From.Rounds, soakMinRows, soakFrom, mib(lo.RSS), lo.Rounds, mib(hi.RSS), hi.Rounds)
		}
		p("\n")
	}

	// 7. Latency under load.
	if len(r.Latency) > 0 {
		p("## 7. RPC latency in main while heavy work runs (µs)\n\n")
		p("| background work | ran | RPC | n | p50 | p99 | p99.9 | max | errors | p99.9 < 100 ms |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.Latency {
			ok := x.N > 0 && x.P999 < 100e3 && x.Errors == 0
			if !ok {
				missed = append(missed, fmt.Sprintf("latency: %s p99.9 during %s: %s (target < 100 ms)", x.RPC, x.Work, us(x.P999)))
			}
			p("| %s | %.1f s | %s | %d | %s | %s | %s | %s | %d | %s |\n", x.Work, x.Seconds, x.RPC, x.N, us(x.P50), us(x.P99), us(x.P999), us(x.Max), x.Errors, verdict(ok))
		}
		p("\n")
	}

	// 8. Kernel client.
	if r.Kernel != nil {
		renderKernel(r, p, &missed)
	}

	// 9. Scale-out backend.
	if r.ScaleOut != nil {
		renderScaleOut(r.ScaleOut, p, &missed)
	}

	// 10. Workspaces for agents.
	if r.Worktrees != nil {
		renderWorktrees(r.Worktrees, p, &missed)
	}

	p("## Targets missed\n\n")
	if len(missed) == 0 && len(r.Errors) == 0 {
		p("None.\n")
	}
	for _, m := range missed {
		p("- %s\n", m)
	}
	for _, e := range r.Errors {
		p("- not measured: %s\n", shorten(e))
	}
	for _, n := range r.Notes {
		p("- note: %s\n", n)
	}
	return b.String()
}

// shorten puts an error on one line and, when it is long, keeps its
// start (what failed) and its end (where a server's log tail ends with
// the cause), dropping the middle.
func shorten(s string) string {
	const head, tail = 200, 600
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > head+tail+10 {
		s = strings.ToValidUTF8(s[:head]+" … "+s[len(s)-tail:], "")
	}
	return s
}

// seqClientSys prints the libnfs tools' own system CPU time per read beside
// their read throughput: the figure that tells a slow read of the client's
// making from one of the server's.
func seqClientSys(p func(string, ...any), rows []seqRow) {
	var some bool
	for _, s := range rows {
		some = some || s.ClientSys.N > 0
	}
	if !some {
		return
	}
	p("The libnfs tools' own system CPU time per read of the file (ms; for nfs-cp mostly its copy into the new file in /dev/shm, which costs more when the machine gave the memory back to its host; runs in order, read MiB/s in brackets):\n\n")
	p("| server | client | client system CPU, median (min–max) | per run |\n|---|---|---|---|\n")
	for _, s := range rows {
		if s.ClientSys.N == 0 {
			continue
		}
		var runs []string
		for i, v := range s.ClientSys.Values {
			r := ""
			if i < len(s.Read.Values) {
				r = fmt.Sprintf(" [%s]", num(s.Read.Values[i]))
			}
			runs = append(runs, num(v)+r)
		}
		p("| %s | %s | %s | %s |\n", s.Server, s.Client, mmm(s.ClientSys), strings.Join(runs, ", "))
	}
	p("\n")
}

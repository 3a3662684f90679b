package main

import (
	"fmt"

	"github.com/branchnfs/branchnfs/bench/branchops"
)

// storageRow is one rendered row of the storage table.
type storageRow struct {
	md     string
	met    bool
	missed string
}

// churnRow renders the CHURN and ABORTCHURN rows, whose targets are not a
// number of bytes added: CHURN's store must stay within 1.5 × the live
// data, ABORTCHURN may add at most 5 MiB. ok is false for other workloads.
func churnRow(s branchops.GrowthResult) (row storageRow, ok bool) {
	how := fmt.Sprintf("%s (idle %g s, no explicit GC)", s.Workload, s.IdleSeconds)
	switch s.Workload {
	case "CHURN":
		limit := s.LiveBytes * 3 / 2
		ratio := float64(s.AfterBytes) / float64(max(s.LiveBytes, 1))
		row.met = s.AfterBytes <= limit
		row.md = fmt.Sprintf("| %s | %d | %d | %d | %.4f | store ≤ 1.5 × live data (%.0f MiB): %.3f × | - | %s |\n",
			how, s.BaseBytes, s.AfterBytes, s.AddedBytes, s.AddedMiB, float64(limit)/(1<<20), ratio, verdict(row.met))
		row.missed = fmt.Sprintf("storage CHURN: store %.1f MiB after the rounds, %.2f × the live data (target ≤ 1.5 ×)", float64(s.AfterBytes)/(1<<20), ratio)
	case "ABORTCHURN":
		row.met = s.AddedMiB <= 5
		row.md = fmt.Sprintf("| %s | %d | %d | %d | %.4f | ≤ 5 MiB | - | %s |\n",
			how, s.BaseBytes, s.AfterBytes, s.AddedBytes, s.AddedMiB, verdict(row.met))
		row.missed = fmt.Sprintf("storage ABORTCHURN: %.4f MiB added (target ≤ 5 MiB)", s.AddedMiB)
	default:
		return row, false
	}
	return row, true
}

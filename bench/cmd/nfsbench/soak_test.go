package main

import "testing"

// TestSoakVerdict: the soak's target tells memory kept per round from the
// memtable and store-garbage cycles of a bounded server.
func TestSoakVerdict(t *testing.T) {
	rows := func(every int, rssMiB ...float64) []soakRow {
		var out []soakRow
		for i, m := range rssMiB {
			out = append(out, soakRow{Rounds: (i + 1) * every, RSS: int64(m * (1 << 20))})
		}
		return out
	}
	linear := func(kibPerRound float64) []soakRow {
		var out []soakRow
		for r := 1000; r <= 10000; r += 1000 {
			out = append(out, soakRow{Rounds: r, RSS: int64(55<<20 + kibPerRound*1024*float64(r))})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		rows   []soakRow
		judged bool
		ok     bool
	}{
		// RSS of a server that kept records of ended branches: 53 → 85 MiB
		// over 6,000 rounds, 5.6 KB a round.
		{"kept per branch", []soakRow{{Rounds: 600, RSS: 53 << 20}, {Rounds: 1200, RSS: 58 << 20}, {Rounds: 2400, RSS: 66 << 20},
			{Rounds: 3600, RSS: 72 << 20}, {Rounds: 4800, RSS: 77 << 20}, {Rounds: 6000, RSS: 85 << 20}}, true, false},
		{"3 KiB a round", linear(3), true, false},
		{"1 KiB a round", linear(1), true, true},
		// A run of 10,000 rounds on a bounded server: the memtable and
		// the store's garbage fill up to 8,000 rounds, then give memory
		// back.
		{"bounded", rows(1000, 60.8, 66.3, 72.3, 74.9, 78.8, 85.6, 86.7, 90.8, 74.8, 74.7), true, true},
		{"flat", rows(1000, 60, 61, 60, 61, 60), true, true},
		{"one row past the warm-up", rows(1000, 60, 80), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			early, late, grew, ok := soakVerdict(tc.rows)
			judged := early.Rounds > 0 && late.Rounds > 0
			if judged != tc.judged || (judged && ok != tc.ok) {
				t.Fatalf("soakVerdict = early %d rounds, late %d, %+.1f MiB, ok %v; want judged %v, ok %v", early.Rounds, late.Rounds, grew, ok, tc.judged, tc.ok)
			}
		})
	}
}

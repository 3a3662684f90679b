package main

import "testing"

// TestSoakVerdict: the soak's target tells memory kept per round from the
// cache, memtable and store-garbage cycles of a bounded server.
func TestSoakVerdict(t *testing.T) {
	// rows makes a row every 1,000 rounds from RSS and store sizes in MiB
	// (the store 1 MiB when not given).
	rows := func(rss []float64, store ...float64) []soakRow {
		var out []soakRow
		for i, m := range rss {
			x := soakRow{Rounds: (i + 1) * 1000, RSS: int64(m * (1 << 20)), StoreBytes: 1 << 20}
			if i < len(store) {
				x.StoreBytes = int64(store[i] * (1 << 20))
			}
			out = append(out, x)
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
		name     string
		rows     []soakRow
		from     int // first row judged
		judged   bool
		ok       bool
		wantWarm bool
	}{
		// A server that kept records of ended branches: 53 → 85 MiB over
		// 6,000 rounds, 5.6 KB a round.
		{"kept per branch", []soakRow{{Rounds: 600, RSS: 53 << 20}, {Rounds: 1200, RSS: 58 << 20}, {Rounds: 2400, RSS: 66 << 20},
			{Rounds: 3600, RSS: 72 << 20}, {Rounds: 4800, RSS: 77 << 20}, {Rounds: 6000, RSS: 85 << 20}}, 1200, true, false, false},
		{"3 KiB a round", linear(3), 2000, true, false, false},
		{"1 KiB a round", linear(1), 2000, true, true, false},
		{"flat", rows([]float64{60, 61, 60, 61, 60}), 2000, true, true, false},
		// 20,000 rounds on 2026-12-08: caches and garbage fill up to the
		// first GC after 8,000 rounds, then RSS cycles.
		{"bounded", rows([]float64{59.9, 66.3, 73.3, 74.8, 80.6, 86.6, 88.5, 89.8, 92.5, 90.1, 93.8, 98.9, 98.7, 96.3, 82.8, 87.6, 90.4, 97.8, 78.6, 77.7},
			1.6, 3.2, 4.8, 6.9, 8.9, 10.9, 12.8, 1.6, 3.7, 5.6, 7.8, 9.8, 12.1, 13.9, 6.0, 8.0, 10.2, 12.6, 2.6, 5.1), 8000, true, true, true},
		// The same warm-up leaking 3 KiB a round on top.
		{"bounded and kept per branch", func() []soakRow {
			rs := rows([]float64{59.9, 66.3, 73.3, 74.8, 80.6, 86.6, 88.5, 89.8, 92.5, 90.1, 93.8, 98.9, 98.7, 96.3, 82.8, 87.6, 90.4, 97.8, 78.6, 77.7},
				1.6, 3.2, 4.8, 6.9, 8.9, 10.9, 12.8, 1.6, 3.7, 5.6, 7.8, 9.8, 12.1, 13.9, 6.0, 8.0, 10.2, 12.6, 2.6, 5.1)
			for i := range rs {
				rs[i].RSS += int64(rs[i].Rounds) * 3 << 10
			}
			return rs
		}(), 8000, true, false, true},
		// Another run of 20,000 rounds, two of whose rows fell in a GC
		// (142.3 and 146.5 MiB, back to 76.4 after).
		{"rows in a GC", rows([]float64{59.9, 66.1, 72.3, 78.9, 85.7, 92.0, 98.5, 103.6, 104.4, 90.5, 93.9, 99.7, 102.2, 107.7, 142.3, 96.8, 103.0, 116.6, 146.5, 76.4},
			1.5, 3.0, 4.7, 6.3, 8.4, 10.5, 12.6, 1.4, 3.4, 5.3, 7.2, 9.2, 11.0, 12.9, 5.1, 7.7, 10.2, 14.0, 2.1, 4.2), 8000, true, true, true},
		// 10,000 rounds whose store first shrank after 9,000: too short.
		{"warm too late", rows([]float64{61.0, 67.8, 73.3, 79.7, 85.6, 91.4, 97.0, 104.6, 108.2, 89.5},
			1.7, 3.3, 5.0, 6.6, 8.3, 10.0, 11.8, 13.7, 2.1, 3.9), 9000, false, false, true},
		{"one row past the warm-up", rows([]float64{60, 80}), 2000, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := soakVerdict(tc.rows)
			if j.From.Rounds != tc.from || j.Judged != tc.judged || j.OK != tc.ok || j.Warm != tc.wantWarm {
				t.Fatalf("soakVerdict = %+v; want from %d rounds, judged %v, ok %v, warm %v", j, tc.from, tc.judged, tc.ok, tc.wantWarm)
			}
		})
	}
}

package stats

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	cases := []struct {
		name                  string
		in                    []float64
		median, min, max, p99 float64
	}{
		{"one", []float64{7}, 7, 7, 7, 7},
		{"odd", []float64{3, 1, 2}, 2, 1, 3, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5, 1, 4, 4},
		{"hundred", seq(100), 50.5, 1, 100, 99},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Summarize(c.in)
			if s.N != len(c.in) || s.Median != c.median || s.Min != c.min || s.Max != c.max || s.P99 != c.p99 {
				t.Fatalf("Summarize(%v) = %+v, want median %v min %v max %v p99 %v", c.in, s, c.median, c.min, c.max, c.p99)
			}
		})
	}
	in := []float64{3, 1, 2}
	Summarize(in)
	if in[0] != 3 || in[1] != 1 {
		t.Fatalf("Summarize modified its input: %v", in)
	}
	if s := Summarize(nil); s.N != 0 {
		t.Fatalf("Summarize(nil) = %+v", s)
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[n-1-i] = float64(i + 1)
	}
	return out
}

func TestMicros(t *testing.T) {
	got := Micros([]time.Duration{1500 * time.Nanosecond, 2 * time.Millisecond})
	if got[0] != 1.5 || got[1] != 2000 {
		t.Fatalf("Micros = %v", got)
	}
}

// Package stats summarises benchmark samples.
package stats

import (
	"math"
	"slices"
	"time"
)

// Summary of a set of samples: median, min, max and nearest-rank p99.
type Summary struct {
	N      int       `json:"n"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	P99    float64   `json:"p99"`
	Values []float64 `json:"values,omitempty"`
}

// Summarize returns the summary of xs (which it does not modify).
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{N: len(s), Median: Percentile(s, 50), Min: s[0], Max: s[len(s)-1], P99: Percentile(s, 99), Values: xs}
}

// Percentile returns the nearest-rank p-th percentile of sorted s.
func Percentile(s []float64, p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	if p == 50 && len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// Micros converts durations to microseconds.
func Micros(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.Nanoseconds()) / 1e3
	}
	return out
}

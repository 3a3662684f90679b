package main

import (
	"fmt"
	"strings"
	"testing"
)

// The CPU table takes medians over the runs; the idle server's column is
// the other server's time during the serving one's step.
func TestRenderKernelCPU(t *testing.T) {
	cpu := func(b, g, q, h float64) map[string]float64 {
		return map[string]float64{"branchnfs": b, "ganesha": g, "qemu": q, "host": h}
	}
	k := &kernelResult{Samples: []kernelSample{
		{Server: "branchnfs", Run: 1, Step: "lsR", CPU: cpu(0.5, 0, 1, 2), CPUBefore: cpu(0.25, 0, 0, 0)},
		{Server: "branchnfs", Run: 2, Step: "lsR", CPU: cpu(0.75, 0, 1, 2), CPUBefore: cpu(0.5, 0, 0, 0)},
		{Server: "branchnfs", Run: 3, Step: "lsR", CPU: cpu(0.25, 0, 3, 4), CPUBefore: cpu(2, 0, 0, 0)},
		{Server: "ganesha", Run: 1, Step: "lsR", CPU: cpu(0.125, 0.25, 0.5, 1), CPUBefore: cpu(0, 0, 0, 0)},
		{Server: "ganesha", Run: 2, Step: "lsR", Error: "failed", CPU: cpu(9, 9, 9, 9)},
	}}
	var b strings.Builder
	renderKernelCPU(k, func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	// branchnfs: itself 0.5, ganesha idle 0, qemu 1, rest 2-1-0.5 = 0.5,
	// before 0.5; ganesha: itself 0.25, branchnfs idle 0.125, qemu 0.5,
	// rest 0.125; the failed run left out.
	want := "| lsR | 0.50 / 0.25 | 0.00 / 0.12 | 1.00 / 0.50 | — / — | — / — | 0.50 / 0.12 | 0.50 / 0.00 |\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	// Steps not timed (--kernel-steps) are left out.
	if strings.Contains(b.String(), "| untar |") {
		t.Errorf("table shows a step without samples:\n%s", b.String())
	}

	// With a baseline as a third server, every column has three figures
	// and the idle one sums the two servers not serving.
	three := &kernelResult{Samples: []kernelSample{
		{Server: "branchnfs", Run: 1, Step: "lsR", CPU: map[string]float64{"branchnfs": 0.5, "baseline": 0.25, "ganesha": 0.125, "qemu": 1, "host": 2}},
		{Server: "baseline", Run: 1, Step: "lsR", CPU: map[string]float64{"branchnfs": 0, "baseline": 0.75, "ganesha": 0, "qemu": 1.5, "host": 2.5}},
		{Server: "ganesha", Run: 1, Step: "lsR", CPU: map[string]float64{"branchnfs": 0.25, "baseline": 0, "ganesha": 0.25, "qemu": 0.5, "host": 1}},
	}}
	var c strings.Builder
	renderKernelCPU(three, func(f string, a ...any) { fmt.Fprintf(&c, f, a...) })
	want3 := "| lsR | 0.50 / 0.75 / 0.25 | 0.38 / 0.00 / 0.25 | 1.00 / 1.50 / 0.50 | — / — / — | — / — / — | 0.12 / 0.25 / 0.00 | — / — / — |\n"
	if !strings.Contains(c.String(), want3) || !strings.Contains(c.String(), "branchnfs / baseline / ganesha") {
		t.Errorf("three servers: table lacks %q:\n%s", want3, c.String())
	}

	var e strings.Builder
	k.Samples[0].Events = map[string]uint64{"inoderevalidates": 3, "vfsopen": 5}
	k.Samples[3].Events = map[string]uint64{"inoderevalidates": 1, "vfsopen": 5, "datainvalidates": 2}
	renderKernelEvents(k, func(f string, a ...any) { fmt.Fprintf(&e, f, a...) })
	if !strings.Contains(e.String(), "- lsR: datainvalidates 0 / 2, inoderevalidates 3 / 1\n") {
		t.Errorf("events:\n%s", e.String())
	}
}

package kv

import (
	"errors"
	"testing"
)

// TestReserveCountsInflightWrites checks that transactions admitted but
// not yet written count against the free space, which statfs does not
// show yet, so that concurrent writers cannot all pass on one figure.
func TestReserveCountsInflightWrites(t *testing.T) {
	const size = 64 << 20
	// 16 MiB above the reserve, and statfs never changes (nothing is
	// written yet): about 8 MiB of writes, counted twice, fit.
	r := reserve{dir: "disk", size: size, statfs: func(string) (statfsResult, error) {
		return statfsResult{avail: size + 16<<20}, nil
	}}
	admitted := 0
	for admitted < 64 {
		err := r.admit(1<<20, false)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		admitted++
	}
	if admitted < 6 || admitted > 8 {
		t.Fatalf("%d concurrent writes of 1 MiB admitted with 16 MiB above the reserve, want 6 to 8", admitted)
	}
	for i := 0; i < admitted; i++ {
		r.release(1 << 20)
	}
	if err := r.admit(1<<20, false); err != nil {
		t.Fatalf("a write after the others finished: %v", err)
	}
}

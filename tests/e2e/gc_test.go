package e2e

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// `branchnfs gc` through a running server gives back the disk space of a
// branch written over NFS and aborted, and main reads the same after it.
func TestGCGivesSpaceBack(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	main, _ := c.mount(t, "/main")
	base := bytes.Repeat([]byte("base "), 1000)
	writeFile(t, main, "/base.txt", base)

	mustCLI(t, store, "fork", "main", "b")
	b, _ := c.mount(t, "/b")
	big := make([]byte, 12<<20)
	x := uint32(11)
	for i := range big {
		x = x*1664525 + 1013904223
		big[i] = byte(x >> 24)
	}
	writeFile(t, b, "/big.bin", big)
	mustCLI(t, store, "abort", "b", "--force")

	var res branches.GCStats
	out := mustCLI(t, store, "gc", "--json")
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("gc --json printed %q: %v", out, err)
	}
	if res.DiskBefore < 12<<20 || res.DiskAfter > res.DiskBefore-8<<20 {
		t.Fatalf("gc: %+v; want the aborted branch's 12 MiB given back", res)
	}
	if out := mustCLI(t, store, "gc"); !strings.Contains(out, "store on disk: ") {
		t.Fatalf("gc printed %q", out)
	}
	if got := mustRead(t, main, "/base.txt"); !bytes.Equal(got, base) {
		t.Fatalf("main's base.txt reads %d bytes after gc, want %d", len(got), len(base))
	}
}

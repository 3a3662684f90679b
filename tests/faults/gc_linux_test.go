package faults

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/testbin"
	nfs "github.com/willscott/go-nfs-client/nfs"
)

// TestFullDiskGC: when a branch filled the disk, aborting it and running
// `branchnfs gc` gives the space back, so that main accepts writes again
// without anything else freed, with the server unprivileged throughout.
// With the smallest reserve (32 MiB, kv.MinReserve), the disk stays with
// less free space than a whole value log's rewrite may take (40 MiB): gc
// still gives the logs of garbage back.
func TestFullDiskGC(t *testing.T) {
	for _, res := range []int64{reserve, 32 << 20} {
		t.Run(fmt.Sprintf("reserve=%dMiB", res>>20), func(t *testing.T) { testFullDiskGC(t, res) })
	}
}

func testFullDiskGC(t *testing.T, reserve int64) {
	disk := mountTmpfs(t, diskSize, nobody)
	store := filepath.Join(disk, "store")
	ballast(t, filepath.Join(disk, "ballast"), 40<<20)
	s := startServer(t, store, nobody, fmt.Sprintf("--reserve=%d", reserve))
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		return testbin.Run(t, binPath, testbin.User{UID: nobody, GID: nobody}, append(args, "--store", store)...)
	}
	if code, _, stderr := cli("fork", "main", "b"); code != 0 {
		t.Fatalf("fork: %d %s", code, stderr)
	}
	cb := mount(t, s.port, "/b", 0)
	a := &acked{fh: map[int][]byte{}, chunks: map[int]int{}}
	fill(t, disk, s, cb, a, 0)
	cm := mount(t, s.port, "/main", 0)
	fh, err := cm.tg.Create("after", 0o644)
	if err != nil {
		t.Fatalf("create in main on a full disk: %v", err)
	}
	if stat, err := cm.write(fh, 0, chunkData(1<<20, 0)); err != nil || stat != nfs.NFS3ErrNoSpc {
		t.Fatalf("write to main on a full disk: status %d, %v; want NOSPC", stat, err)
	}

	if code, _, stderr := cli("abort", "b", "--force"); code != 0 {
		t.Fatalf("abort on a full disk: %d %s", code, stderr)
	}
	code, out, stderr := cli("gc", "--json")
	if code != 0 {
		t.Fatalf("gc on a full disk: %d %s", code, stderr)
	}
	var res branches.GCStats
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("gc --json printed %q: %v", out, err)
	}
	t.Logf("gc: %+v; %d MiB free on the disk", res, freeBytes(t, disk)>>20)
	if res.DiskAfter > res.DiskBefore-100<<20 {
		t.Fatalf("gc gave back %d bytes of a branch that filled the disk", res.DiskBefore-res.DiskAfter)
	}
	s.alive(t, "after gc")
	if stat, err := cm.write(fh, 0, chunkData(1<<20, 0)); err != nil || stat != nfs.NFS3Ok {
		t.Fatalf("write to main after gc: status %d, %v; want OK", stat, err)
	}
	got, err := cm.read(fh)
	if err != nil || len(got) != chunk {
		t.Fatalf("read back after gc: %d bytes, %v", len(got), err)
	}
}

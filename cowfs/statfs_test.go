package cowfs

import (
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// TestStatFSReportsTheStoreDisk checks that StatFS describes the store's
// filesystem minus its reserve, not the working directory's.
func TestStatFSReportsTheStoreDisk(t *testing.T) {
	dirs := map[string]string{"tempdir": t.TempDir()}
	if runtime.GOOS == "linux" {
		// A tmpfs, so that the store's disk differs from the working
		// directory's.
		if d, err := os.MkdirTemp("/dev/shm", "statfs"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			dirs["shm"] = d
		} else {
			t.Logf("no /dev/shm (%v): only the temporary directory", err)
		}
	}
	const reserve = 32 << 20 // kv.MinReserve with the default options
	const slack = 64 << 20   // other processes write to the same disk
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			st, err := kv.OpenBadger(dir, kv.BadgerOptions{Reserve: reserve, GCInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			_, f := newTestTree(t, st, Options{})
			got, err := f.StatFS()
			if err != nil {
				t.Fatal(err)
			}
			var want, cwd syscall.Statfs_t
			if err := syscall.Statfs(dir, &want); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Statfs(".", &cwd); err != nil {
				t.Fatal(err)
			}
			bs := uint64(want.Bsize)
			if got.TotalBytes != uint64(want.Blocks)*bs {
				t.Errorf("TotalBytes = %d, want %d (the store's disk; the working directory's is %d)",
					got.TotalBytes, uint64(want.Blocks)*bs, uint64(cwd.Blocks)*uint64(cwd.Bsize))
			}
			avail := uint64(want.Bavail) * bs
			if avail > reserve+slack && (got.AvailBytes+slack < avail-reserve || got.AvailBytes > avail-reserve+slack) {
				t.Errorf("AvailBytes = %d, want about %d (free %d minus the reserve %d)", got.AvailBytes, avail-reserve, avail, reserve)
			}
			if got.FreeBytes < got.AvailBytes {
				t.Errorf("FreeBytes %d < AvailBytes %d", got.FreeBytes, got.AvailBytes)
			}
		})
	}
}

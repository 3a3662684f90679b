package faults

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	nfs "github.com/willscott/go-nfs-client/nfs"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

const (
	diskSize = 256 << 20
	reserve  = 64 << 20
	chunk    = 1 << 20
)

// chunkData is the content of chunk i of file f: random, so that no block
// is shared (the store keeps one copy of equal blocks).
func chunkData(f, i int) []byte {
	b := make([]byte, chunk)
	rand.New(rand.NewSource(int64(f)<<20 | int64(i))).Read(b)
	return b
}

// mountTmpfs mounts a tmpfs of size bytes owned by uid and returns its path.
func mountTmpfs(t *testing.T, size int64, uid int) string {
	t.Helper()
	needRoot(t, "it mounts a small tmpfs to fill")
	dir := filepath.Join(testbin.SharedTempDir(t, "bnfsfd"), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("mount -t tmpfs: %v: %s", err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	return dir
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bavail) * int64(s.Bsize)
}

// ballast writes a file of n bytes (as root) that the test deletes to
// give space back.
func ballast(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n > 0 {
		m := min(n, int64(len(buf)))
		if _, err := f.Write(buf[:m]); err != nil {
			t.Fatalf("ballast %s: %v", path, err)
		}
		n -= m
	}
}

// acked records what the server acknowledged: chunks per file.
type acked struct {
	fh     map[int][]byte
	chunks map[int]int
}

// fill writes 4-chunk files from file number next on until a WRITE is
// refused with NFS3ERR_NOSPC, and returns the next file number.
func fill(t *testing.T, disk string, s *server, c *conn, a *acked, next int) int {
	t.Helper()
	for f := next; ; f++ {
		if f > next+diskSize/chunk {
			t.Fatalf("wrote %d files without NFS3ERR_NOSPC on a %d MiB disk", f-next, diskSize>>20)
		}
		name := fmt.Sprintf("f%04d", f)
		fh, err := c.tg.Create(name, 0o644)
		if err != nil {
			if nfsStatus(err) == nfs.NFS3ErrNoSpc {
				return f
			}
			s.alive(t, "create")
			t.Fatalf("create %s: %v", name, err)
		}
		a.fh[f] = fh
		for i := 0; i < 4; i++ {
			stat, err := c.write(fh, uint64(i*chunk), chunkData(f, i))
			if err != nil {
				s.alive(t, "write")
				t.Fatalf("write %s: %v", name, err)
			}
			switch stat {
			case nfs.NFS3Ok:
				a.chunks[f]++
			case nfs.NFS3ErrNoSpc:
				t.Logf("NFS3ERR_NOSPC after %d files; %d MiB free on the disk", f-next, freeBytes(t, disk)>>20)
				return f + 1
			default:
				t.Fatalf("write %s: NFS3 status %d, want OK or NOSPC", name, stat)
			}
		}
	}
}

func nfsStatus(err error) uint32 {
	if ne, ok := err.(*nfs.Error); ok {
		return ne.ErrorNum
	}
	return 1 << 31
}

// check reads back every acknowledged chunk.
func check(t *testing.T, c *conn, a *acked, when string) {
	t.Helper()
	for f, fh := range a.fh {
		got, err := c.read(fh)
		if err != nil {
			t.Fatalf("%s: read f%04d: %v", when, f, err)
		}
		if len(got) != a.chunks[f]*chunk {
			t.Fatalf("%s: f%04d has %d bytes, want %d acknowledged", when, f, len(got), a.chunks[f]*chunk)
		}
		for i := 0; i < a.chunks[f]; i++ {
			if !bytes.Equal(got[i*chunk:(i+1)*chunk], chunkData(f, i)) {
				t.Fatalf("%s: f%04d chunk %d differs from what was acknowledged", when, f, i)
			}
		}
	}
}

// TestFullDisk fills a small tmpfs through NFS with the server running as
// an unprivileged user. The server must answer NFS3ERR_NOSPC instead of
// dying (Badger writes through mmaps: a full disk means SIGBUS), keep
// serving reads, accept writes again when space returns, open read-only
// on a full disk, and lose no acknowledged byte across restarts.
func TestFullDisk(t *testing.T) {
	disk := mountTmpfs(t, diskSize, nobody)
	store := filepath.Join(disk, "store")
	ballast1 := filepath.Join(disk, "ballast1")
	ballast(t, ballast1, 40<<20)
	res := fmt.Sprintf("--reserve=%d", reserve)

	s := startServer(t, store, nobody, res)
	c := mount(t, s.port, "/main", 0)
	a := &acked{fh: map[int][]byte{}, chunks: map[int]int{}}

	// Fill the disk: the server refuses writes and stays up.
	next := fill(t, disk, s, c, a, 0)
	s.alive(t, "after NOSPC")
	if free := freeBytes(t, disk); free < reserve/2 {
		t.Errorf("the store let the disk fill to %d MiB free (reserve %d MiB)", free>>20, reserve>>20)
	}
	// New content is refused (rewriting content the store already holds
	// adds only references, which a full disk still accepts).
	if stat, err := c.write(a.fh[0], 0, chunkData(1<<20, 0)); err != nil || stat != nfs.NFS3ErrNoSpc {
		t.Errorf("overwrite on a full disk: status %d, %v; want NOSPC", stat, err)
	}
	fs, err := c.fsstat()
	if err != nil {
		t.Fatalf("FSSTAT: %v", err)
	}
	if fs.Tbytes != diskSize || fs.Abytes > 2*chunk {
		t.Errorf("FSSTAT on a full disk = %+v, want the %d-byte tmpfs with no space available", fs, diskSize)
	}
	check(t, c, a, "reads on a full disk")

	// Space returns: writes resume without a restart.
	if err := os.Remove(ballast1); err != nil {
		t.Fatal(err)
	}
	f := next
	fh, err := c.tg.Create(fmt.Sprintf("f%04d", f), 0o644)
	if err != nil {
		t.Fatalf("create after freeing space: %v", err)
	}
	a.fh[f] = fh
	if stat, err := c.write(fh, 0, chunkData(f, 0)); err != nil || stat != nfs.NFS3Ok {
		t.Fatalf("write after freeing space: status %d, %v", stat, err)
	}
	a.chunks[f]++
	next = fill(t, disk, s, c, a, f+1)
	check(t, c, a, "after the second fill")
	s.stop(t)

	// Below half the reserve, the store opens read-only and still serves.
	ballast2 := filepath.Join(disk, "ballast2")
	ballast(t, ballast2, max(freeBytes(t, disk)-reserve/4, 0))
	s = startServer(t, store, nobody, res)
	if out := s.out.String(); !strings.Contains(out, "read-only") {
		t.Errorf("serve on a full disk did not say it serves read-only:\n%s", out)
	}
	c = mount(t, s.port, "/main", 0)
	check(t, c, a, "read-only on a full disk")
	if stat, err := c.write(a.fh[0], 0, chunkData(1<<20, 0)); err != nil || stat != nfs.NFS3ErrNoSpc {
		t.Errorf("write to a store opened on a full disk: status %d, %v; want NOSPC", stat, err)
	}
	if _, err := c.tg.Create("new", 0o644); nfsStatus(err) != nfs.NFS3ErrNoSpc {
		t.Errorf("create in a store opened on a full disk: %v, want NOSPC", err)
	}
	s.stop(t)

	// With space back, a restart writes again; nothing acknowledged is lost.
	if err := os.Remove(ballast2); err != nil {
		t.Fatal(err)
	}
	s = startServer(t, store, nobody, res)
	c = mount(t, s.port, "/main", 0)
	fh, err = c.tg.Create(fmt.Sprintf("f%04d", next), 0o644)
	if err != nil {
		t.Fatalf("create after a restart with space: %v", err)
	}
	a.fh[next] = fh
	if stat, err := c.write(fh, 0, chunkData(next, 0)); err != nil || stat != nfs.NFS3Ok {
		t.Fatalf("write after a restart with space: status %d, %v", stat, err)
	}
	a.chunks[next]++
	s.stop(t)
	s = startServer(t, store, nobody, res)
	c = mount(t, s.port, "/main", 0)
	check(t, c, a, "after the last restart")
	s.stop(t)
}

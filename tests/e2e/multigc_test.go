package e2e

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"

	"github.com/branchnfs/branchnfs/blobs"
)

// TestSeveralServersGC runs two servers on one etcd cluster and one
// bucket: server B runs `branchnfs gc` again and again while server A
// writes, through NFS, new content and content it has just orphaned (a
// file written in a branch that is then aborted, and written again into
// a live branch, where A finds its blocks in the bucket and uploads
// nothing). Afterwards every file reads back through B, whose cache never
// held them (each block comes from the bucket), and the blocks only
// aborted branches used are gone from the bucket. (B's gc also rechunks
// A's files, and takes the live branches from the stored records, as
// A's forks may not have reached it yet.)
func TestSeveralServersGC(t *testing.T) {
	ms := startServers(t, 2, "/multi-gc/")
	a, b := ms.stores[0], ms.stores[1]
	ca := dial(t, ms.srvs[0].port)
	mustCLI(t, a, "fork", "main", "live")
	live, _ := ca.mount(t, "/live")

	stop := make(chan struct{})
	gcDone := make(chan error, 1)
	// gc runs one after another: run n starts once n-1 have finished.
	var started, finished atomic.Int64
	var exited atomic.Bool
	go func() {
		defer exited.Store(true)
		for {
			select {
			case <-stop:
				gcDone <- nil
				return
			default:
			}
			started.Add(1)
			if code, _, stderr := cli(t, b, "gc"); code != 0 {
				gcDone <- fmt.Errorf("gc on server B: exit %d: %s", code, stderr)
				return
			}
			finished.Add(1)
		}
	}()
	// overlapGC waits until a whole run of gc has taken place since it was
	// called (or the runs failed, which gcDone reports): however slow the
	// machine, runs of gc fall between A's writes, not only before or
	// after them.
	overlapGC := func() {
		t.Helper()
		after := started.Load()
		for deadline := time.Now().Add(3 * time.Minute); finished.Load() <= after && !exited.Load(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no run of gc on server B finished in 3 minutes (%d started, %d finished)", started.Load(), finished.Load())
			}
		}
	}
	r := rand.New(rand.NewPCG(8, 8))
	random := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return p
	}
	const block = 32 << 10
	object := func(k blobs.Key) string {
		h := hex.EncodeToString(k[:])
		return filepath.Join(ms.so.s3.BucketDir(), "p", h[:2], h)
	}
	want := map[string][]byte{}
	var deadOnly []blobs.Key
	for i := range 10 {
		tmp := fmt.Sprintf("tmp%d", i)
		mustCLI(t, a, "fork", "main", tmp)
		tg, _ := ca.mount(t, "/"+tmp)
		shared := random(3 * block)
		dead := random(block)
		writeFile(t, tg, "x", shared)
		writeFile(t, tg, "d", dead)
		deadOnly = append(deadOnly, blobs.Sum(dead))
		if _, err := os.Stat(object(blobs.Sum(dead))); err != nil {
			t.Fatalf("a block just written is not where the test looks for blocks: %v", err)
		}
		mustCLI(t, a, "abort", "--force", tmp)
		if i%3 == 0 {
			// A gc between the abort and the write of the orphaned
			// content again.
			overlapGC()
		}
		name := fmt.Sprintf("f%d", i)
		data := append(append([]byte(nil), shared...), random(block+100)...)
		writeFile(t, live, name, data)
		want[name] = data
	}
	close(stop)
	if err := <-gcDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs of gc on server B while server A wrote", finished.Load())
	mustCLI(t, b, "gc")

	cb := dial(t, ms.srvs[1].port)
	var blive *nfs.Target
	eventually(t, "live on B", func() error {
		fh, err := cb.mnt("/live")
		if err == nil {
			blive = cb.target(t, fh)
		}
		return err
	})
	for name, w := range want {
		got, err := readFile(blive, name)
		if err != nil {
			t.Fatalf("reading %s through server B: %v", name, err)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("%s reads %d bytes through server B that differ from the %d written on A", name, len(got), len(w))
		}
	}
	for _, k := range deadOnly {
		h := hex.EncodeToString(k[:])
		if _, err := os.Stat(object(k)); err == nil {
			t.Fatalf("blob %s, used only by an aborted branch, is still in the bucket after gc", h[:16])
		}
	}
}

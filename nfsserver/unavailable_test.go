package nfsserver

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// backendDown runs calls against a backend that down made unavailable:
// a WRITE of new data and a READ answer NFS3ERR_JUKEBOX, and so does a
// CREATE when the metadata is down. Once up has brought the backend back,
// the same calls succeed, and the file reads back whole: what was written
// before and what was written after.
func backendDown(t *testing.T, m *branches.Manager, metadata bool, down, up func()) {
	t.Helper()
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	k := c.as(authRoot)
	root := c.mnt("/main")
	fh, _, st := k.create(root, "f", 0, sa{mode: u32p(0o644)})
	must(t, st, "create f")
	first := bytes.Repeat([]byte("before the outage "), 4096)
	if _, _, _, st := k.write(fh, 0, first, 2); st != nfs.NFSStatusOk {
		t.Fatalf("write before the outage: status %d", st)
	}
	second := bytes.Repeat([]byte("written once it is back "), 2048)
	down()
	if _, _, _, st := k.write(fh, uint64(len(first)), second, 2); st != nfs.NFSStatusJukebox {
		t.Fatalf("write while the backend is down: status %d, want NFS3ERR_JUKEBOX (%d)", st, nfs.NFSStatusJukebox)
	}
	if _, _, st := k.read(fh, 0, 1<<20); st != nfs.NFSStatusJukebox {
		t.Fatalf("read while the backend is down: status %d, want NFS3ERR_JUKEBOX (%d)", st, nfs.NFSStatusJukebox)
	}
	if metadata {
		if _, _, st := k.create(root, "g", 0, sa{mode: u32p(0o644)}); st != nfs.NFSStatusJukebox {
			t.Fatalf("create while the backend is down: status %d, want NFS3ERR_JUKEBOX (%d)", st, nfs.NFSStatusJukebox)
		}
	}
	up()
	if _, _, _, st := k.write(fh, uint64(len(first)), second, 2); st != nfs.NFSStatusOk {
		t.Fatalf("the same write once the backend is back: status %d", st)
	}
	if _, _, st := k.create(root, "g", 0, sa{mode: u32p(0o644)}); st != nfs.NFSStatusOk {
		t.Fatalf("the same create once the backend is back: status %d", st)
	}
	want := append(append([]byte(nil), first...), second...)
	var got []byte
	for {
		data, eof, st := k.read(fh, uint64(len(got)), 1<<20)
		must(t, st, "read f")
		got = append(got, data...)
		if eof || len(data) == 0 {
			break
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("f after the outage: %d bytes, want %d, equal %v", len(got), len(want), bytes.Equal(got, want))
	}
}

// TestEtcdDownAnswersJukebox: with the metadata on a 3-member etcd
// cluster that lost two members (no leader), calls answer
// NFS3ERR_JUKEBOX, so Linux and macOS clients retry them later instead
// of failing the application; after the members return, the retried
// calls succeed and nothing is lost.
func TestEtcdDownAnswersJukebox(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{})
	st := c.NewStore(t, etcdkv.Options{RequestTimeout: 2 * time.Second})
	m := branchestest.NewManager(t, branches.Options{Store: st, ReclaimDelay: -1})
	backendDown(t, m, true, func() {
		c.Stop(0)
		c.Stop(1)
	}, func() { c.Restart(t) })
}

// TestBlobsDownAnswersJukebox: with the blocks in a blob store that does
// not answer (blobs.ErrUnavailable, as S3 answers once its retries are
// spent), a WRITE of new data and a READ of data it does not cache
// answer NFS3ERR_JUKEBOX; once it is back, the same WRITE succeeds.
func TestBlobsDownAnswersJukebox(t *testing.T) {
	bs := &downBlobs{Store: blobs.NewMem()}
	m := branchestest.NewManager(t, branches.Options{Store: kvtest.NewStore(t), ReclaimDelay: -1, FS: cowfs.Options{Blobs: bs}})
	backendDown(t, m, false, func() { bs.down.Store(true) }, func() { bs.down.Store(false) })
}

// downBlobs is a blob store that fails every call with
// blobs.ErrUnavailable while down is set.
type downBlobs struct {
	blobs.Store
	down atomic.Bool
}

func (d *downBlobs) err(op string) error {
	if d.down.Load() {
		return fmt.Errorf("%w: %s: no answer from the test's bucket", blobs.ErrUnavailable, op)
	}
	return nil
}

func (d *downBlobs) Put(ctx context.Context, k blobs.Key, data []byte) error {
	if err := d.err("put"); err != nil {
		return err
	}
	return d.Store.Put(ctx, k, data)
}

func (d *downBlobs) Get(ctx context.Context, k blobs.Key) ([]byte, error) {
	if err := d.err("get"); err != nil {
		return nil, err
	}
	return d.Store.Get(ctx, k)
}

func (d *downBlobs) Has(ctx context.Context, k blobs.Key) (bool, error) {
	if err := d.err("has"); err != nil {
		return false, err
	}
	return d.Store.Has(ctx, k)
}

func (d *downBlobs) Delete(ctx context.Context, k blobs.Key) error {
	if err := d.err("delete"); err != nil {
		return err
	}
	return d.Store.Delete(ctx, k)
}

func (d *downBlobs) List(ctx context.Context, fn func(blobs.Key) error) error {
	if err := d.err("list"); err != nil {
		return err
	}
	return d.Store.List(ctx, fn)
}

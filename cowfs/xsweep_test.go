package cowfs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	. "github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// xenv is a real 3-member etcd cluster and a real S3 service (versitygw)
// that the subtests of TestCrossServerSweep share, each under its own
// etcd prefix and object prefix: one store, as several servers see it.
type xenv struct {
	cluster *etcdtest.Cluster
	s3      *testbin.S3Server
	n       atomic.Int64
}

// xserver is one server of a store: its own etcd clients, S3 client,
// block cache and lease.
type xserver struct {
	s     *Store
	lease *etcdkv.ServerLease
	raw   blobs.Store // the S3 store, no cache
}

// xstore is one store shared by servers.
type xstore struct {
	e      *xenv
	prefix string // etcd and S3
}

func (e *xenv) newStore() *xstore {
	return &xstore{e: e, prefix: fmt.Sprintf("xsweep%d/", e.n.Add(1))}
}

func (e *xenv) openS3(t *testing.T, prefix string) blobs.Store {
	t.Helper()
	s, err := blobs.OpenS3(t.Context(), blobs.S3Options{Endpoint: e.s3.Endpoint, Bucket: e.s3.Bucket, Prefix: prefix, Insecure: true,
		Region: "us-east-1", AccessKey: e.s3.AccessKey, SecretKey: e.s3.SecretKey, RetryFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// server opens a server of x. wrap, if not nil, wraps its blob store (the
// cache over S3); leased false opens it as today's single server would.
func (x *xstore) server(t *testing.T, wrap func(blobs.Store) blobs.Store, leased bool) *xserver {
	t.Helper()
	st := x.e.cluster.NewStore(t, etcdkv.Options{Prefix: "/" + x.prefix})
	raw := x.e.openS3(t, x.prefix)
	cache, err := blobs.OpenCache(raw, blobs.CacheOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	var b blobs.Store = cache
	if wrap != nil {
		b = wrap(b)
	}
	opts := Options{BlockSize: 4096, InlineMax: 64, Blobs: b}
	srv := &xserver{raw: raw}
	if leased {
		co := x.e.cluster.NewCoord(t, etcdkv.Options{Prefix: "/" + x.prefix})
		srv.lease = co.ServerLease(0)
		opts.Leases = srv.lease
	}
	s, err := Open(t.Context(), st, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.s = s
	return srv
}

// sweep runs one block sweep on srv with the layers of roots live.
func (srv *xserver) sweep(ctx context.Context, roots ...LayerID) (int, error) {
	w, err := srv.s.BeginSweep(func(*Txn) ([]LayerID, error) { return roots, nil })
	if err != nil {
		return 0, err
	}
	defer w.End()
	return w.Run(ctx)
}

// newFile creates a file in a new tree of srv and returns the tree's
// view and the file.
func newFile(t *testing.T, srv *xserver, name string) (LayerID, *View, InodeID) {
	t.Helper()
	l, err := srv.s.NewTree(t.Context(), 0o755, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := srv.s.View([]LayerID{l})
	a, err := v.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l, v, a.Ino
}

// checkReads reads every file of want (name: bytes) in tree l through a
// fresh server of x whose blob store is S3 without a cache, so each
// block comes from the bucket, checked against its hash.
func checkReads(t *testing.T, x *xstore, l LayerID, want map[string][]byte) {
	t.Helper()
	st := x.e.cluster.NewStore(t, etcdkv.Options{Prefix: "/" + x.prefix})
	s, err := Open(t.Context(), st, Options{BlockSize: 4096, InlineMax: 64, Blobs: x.e.openS3(t, x.prefix)})
	if err != nil {
		t.Fatal(err)
	}
	v := s.View([]LayerID{l})
	for name, w := range want {
		a, err := v.Lookup(RootIno, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		buf := make([]byte, len(w)+1)
		n, _, err := v.ReadAt(a.Ino, buf, 0)
		if err != nil {
			t.Fatalf("reading %s from the bucket: %v", name, err)
		}
		if !bytes.Equal(buf[:n], w) {
			t.Fatalf("%s reads %d bytes that differ from the %d written", name, n, len(w))
		}
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// pauser is a blob store whose first Put of an armed content returns only
// once released (after storing it): a server that uploaded and has not
// yet committed the reference.
type pauser struct {
	blobs.Store
	mu       sync.Mutex
	armed    map[blobs.Key]bool
	uploaded chan struct{}
	release  chan struct{}
	puts     map[blobs.Key]int
}

func newPauser(b blobs.Store, keys ...blobs.Key) *pauser {
	p := &pauser{Store: b, armed: map[blobs.Key]bool{}, uploaded: make(chan struct{}), release: make(chan struct{}), puts: map[blobs.Key]int{}}
	for _, k := range keys {
		p.armed[k] = true
	}
	return p
}

func (p *pauser) Put(ctx context.Context, k blobs.Key, data []byte) error {
	err := p.Store.Put(ctx, k, data)
	p.mu.Lock()
	p.puts[k]++
	pause := p.armed[k]
	delete(p.armed, k)
	p.mu.Unlock()
	if pause && err == nil {
		close(p.uploaded)
		<-p.release
	}
	return err
}

func (p *pauser) putsOf(k blobs.Key) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.puts[k]
}

func has(t *testing.T, b blobs.Store, k blobs.Key) bool {
	t.Helper()
	ok, err := b.Has(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestCrossServerSweep runs two servers over one etcd prefix and one
// bucket: one writes while the other sweeps.
func TestCrossServerSweep(t *testing.T) {
	e := &xenv{cluster: etcdtest.StartCluster(t, etcdtest.Options{}), s3: testbin.StartS3(t)}
	t.Run("KeepsOtherServersUpload", func(t *testing.T) { testKeepsUpload(t, e) })
	t.Run("WriteWhileOtherSweeps", func(t *testing.T) { testWriteWhileSweeps(t, e) })
	t.Run("WriterLeaseLostMidUpload", func(t *testing.T) { testWriterLeaseLost(t, e) })
	t.Run("SweeperDiesBeforeDelete", func(t *testing.T) { testSweeperDies(t, e) })
	t.Run("SweeperLeaseTooShort", func(t *testing.T) { testLeaseTooShort(t, e) })
}

// testKeepsUpload: server B sweeps while server A's upload is stored and
// its reference not yet committed. Without the handshake (each server's
// tracker sees only its own writers) B deletes the blob and A's file
// then reads EIO for good.
func testKeepsUpload(t *testing.T, e *xenv) {
	ctx := t.Context()
	x := e.newStore()
	data := randBytes(rand.New(rand.NewPCG(1, 1)), 2*4096)
	k := blobs.Sum(data[:4096])
	var p *pauser
	a := x.server(t, func(b blobs.Store) blobs.Store { p = newPauser(b, k); return p }, true)
	b := x.server(t, nil, true)
	l, v, ino := newFile(t, a, "f")
	done := make(chan error, 1)
	go func() { _, err := v.WriteAt(ino, data, 0); done <- err }()
	<-p.uploaded
	if !has(t, a.raw, k) {
		t.Fatal("the paused upload is not in the bucket")
	}
	if _, err := b.sweep(ctx, l); err != nil {
		t.Fatal(err)
	}
	close(p.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !has(t, a.raw, k) {
		t.Fatal("server B's sweep deleted the blob server A had uploaded and was about to reference")
	}
	checkReads(t, x, l, map[string][]byte{"f": data})
	// Now referenced: a sweep keeps it, and the intents are gone, so a
	// later orphan of it would go.
	if _, err := b.sweep(ctx, l); err != nil {
		t.Fatal(err)
	}
	checkReads(t, x, l, map[string][]byte{"f": data})
}

// testWriteWhileSweeps: server A writes continuously, new content and
// content it just orphaned (written into a tree nobody holds, then again
// into the live tree, so the second write finds the blob and does not
// upload it), while server B sweeps again and again. Every live file
// reads back from the bucket, and what only dead trees used is gone.
func testWriteWhileSweeps(t *testing.T, e *xenv) {
	ctx := t.Context()
	x := e.newStore()
	a := x.server(t, nil, true)
	b := x.server(t, nil, true)
	live, lv, _ := newFile(t, a, "seed")
	r := rand.New(rand.NewPCG(2, 2))
	stop := make(chan struct{})
	var sweeps, swept atomic.Int64
	sweepErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				sweepErr <- nil
				return
			default:
			}
			n, err := b.sweep(ctx, live)
			if err != nil {
				sweepErr <- err
				return
			}
			sweeps.Add(1)
			swept.Add(int64(n))
		}
	}()
	want := map[string][]byte{}
	var deadOnly []blobs.Key // content only dead trees ever used
	const rounds = 40
	for i := range rounds {
		shared := randBytes(r, 3*4096)
		dead := randBytes(r, 4096)
		_, dv, dino := newFile(t, a, "g")
		if _, err := dv.WriteAt(dino, append(append([]byte(nil), shared...), dead...), 0); err != nil {
			t.Fatal(err)
		}
		deadOnly = append(deadOnly, blobs.Sum(dead))
		// The dead tree's blobs are garbage from here: write the shared
		// part again into the live tree, with new content after it.
		name := fmt.Sprintf("f%d", i)
		f, err := lv.Create(RootIno, name, CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := append(append([]byte(nil), shared...), randBytes(r, 4096+100)...)
		if _, err := lv.WriteAt(f.Ino, w, 0); err != nil {
			t.Fatal(err)
		}
		want[name] = w
		if i%8 == 7 {
			// Let a sweep or two pass between the two writes.
			time.Sleep(20 * time.Millisecond)
		}
	}
	close(stop)
	if err := <-sweepErr; err != nil {
		t.Fatalf("server B's sweep: %v", err)
	}
	if _, err := b.sweep(ctx, live); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sweeps went through %d unreferenced blobs while %d rounds were written", sweeps.Load(), swept.Load(), rounds)
	if sweeps.Load() < 2 {
		t.Fatalf("only %d sweeps ran during the writes", sweeps.Load())
	}
	checkReads(t, x, live, want)
	for _, k := range deadOnly {
		if has(t, a.raw, k) {
			t.Fatalf("blob %x, used only by a dead tree, is still in the bucket after the last sweep", k[:8])
		}
	}
}

// testWriterLeaseLost: server A's lease is lost while its upload is in
// flight; B's sweep may then delete the blob, so A's reference commit
// fails, and A starts over: a new lease, a new intent, a new upload.
func testWriterLeaseLost(t *testing.T, e *xenv) {
	ctx := t.Context()
	x := e.newStore()
	data := randBytes(rand.New(rand.NewPCG(3, 3)), 4096)
	k := blobs.Sum(data)
	var p *pauser
	a := x.server(t, func(b blobs.Store) blobs.Store { p = newPauser(b, k); return p }, true)
	b := x.server(t, nil, true)
	l, v, ino := newFile(t, a, "f")
	done := make(chan error, 1)
	go func() { _, err := v.WriteAt(ino, data, 0); done <- err }()
	<-p.uploaded
	if err := a.lease.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sweep(ctx, l); err != nil {
		t.Fatal(err)
	}
	if has(t, a.raw, k) {
		t.Fatal("B's sweep kept a blob whose writer's intent went with its lease")
	}
	close(p.release)
	if err := <-done; err != nil {
		t.Fatalf("the write whose lease was lost did not start over: %v", err)
	}
	if n := p.putsOf(k); n < 2 {
		t.Fatalf("the blob was uploaded %d times: the write did not start over", n)
	}
	checkReads(t, x, l, map[string][]byte{"f": data})
}

// blockingDeletes is a blob store whose Delete waits for its context to
// end and deletes nothing: a sweeper that stops (dies) between its
// transaction and the deletion.
type blockingDeletes struct {
	blobs.Store
	entered chan struct{}
	once    sync.Once
}

func (d *blockingDeletes) Delete(ctx context.Context, k blobs.Key) error {
	d.once.Do(func() { close(d.entered) })
	<-ctx.Done()
	return ctx.Err()
}

// testSweeperDies: B marked an orphan for deletion (its record deleted,
// deleting/h put) and dies before deleting the object. Once its lease
// goes, A writes that content into a live file (the blob exists: no
// upload), and a later sweep keeps it: nothing referenced is missing.
func testSweeperDies(t *testing.T, e *xenv) {
	ctx := t.Context()
	x := e.newStore()
	a := x.server(t, nil, true)
	bd := &blockingDeletes{entered: make(chan struct{})}
	b := x.server(t, func(s blobs.Store) blobs.Store { bd.Store = s; return bd }, true)
	c := x.server(t, nil, true)
	data := randBytes(rand.New(rand.NewPCG(4, 4)), 4096)
	k := blobs.Sum(data)
	_, gv, gino := newFile(t, a, "g")
	if _, err := gv.WriteAt(gino, data, 0); err != nil {
		t.Fatal(err)
	}
	live, lv, ino := newFile(t, a, "f")
	bctx, kill := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() { _, err := b.sweep(bctx, live); bdone <- err }()
	<-bd.entered
	// A writer now waits for the deletion.
	wdone := make(chan error, 1)
	go func() { _, err := lv.WriteAt(ino, data, 0); wdone <- err }()
	select {
	case err := <-wdone:
		t.Fatalf("a write of content being deleted went on without waiting (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	// B dies: its deletion is never sent, its lease is revoked.
	kill()
	if err := <-bdone; err == nil {
		t.Fatal("the killed sweep reported no error")
	}
	if err := b.lease.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wdone; err != nil {
		t.Fatal(err)
	}
	if !has(t, a.raw, k) {
		t.Fatal("the blob is gone")
	}
	if _, err := c.sweep(ctx, live); err != nil {
		t.Fatal(err)
	}
	checkReads(t, x, live, map[string][]byte{"f": data})
}

// shortLease reports a lease deadline closer than a deletion may take.
type shortLease struct{ kv.Leased }

func (s shortLease) LeaseDeadline(ctx context.Context, lease int64) (time.Time, error) {
	if _, err := s.Leased.LeaseDeadline(ctx, lease); err != nil {
		return time.Time{}, err
	}
	return time.Now().Add(5 * time.Second), nil
}

// testLeaseTooShort: a sweep whose lease has less left than a deletion
// may take sends none, and says so; the next sweep deletes the orphan.
func testLeaseTooShort(t *testing.T, e *xenv) {
	ctx := t.Context()
	x := e.newStore()
	a := x.server(t, nil, true)
	data := randBytes(rand.New(rand.NewPCG(5, 5)), 4096)
	k := blobs.Sum(data)
	_, gv, gino := newFile(t, a, "g")
	if _, err := gv.WriteAt(gino, data, 0); err != nil {
		t.Fatal(err)
	}
	live, _, _ := newFile(t, a, "f")
	st := x.e.cluster.NewStore(t, etcdkv.Options{Prefix: "/" + x.prefix})
	co := x.e.cluster.NewCoord(t, etcdkv.Options{Prefix: "/" + x.prefix})
	short, err := Open(ctx, st, Options{BlockSize: 4096, InlineMax: 64, Blobs: x.e.openS3(t, x.prefix), Leases: shortLease{co.ServerLease(0)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&xserver{s: short}).sweep(ctx, live)
	if !errors.Is(err, kv.ErrLeaseLost) {
		t.Fatalf("a sweep with 5 s of lease left: %v, want kv.ErrLeaseLost", err)
	}
	if !has(t, a.raw, k) {
		t.Fatal("the sweep deleted with too little lease left")
	}
	if _, err := a.sweep(ctx, live); err != nil {
		t.Fatal(err)
	}
	if has(t, a.raw, k) {
		t.Fatal("the next sweep did not delete the orphan")
	}
}

// BenchmarkCrossSweepWrite measures 1 MiB writes (32 KiB blocks) on a
// 3-member etcd cluster and S3 (versitygw on loopback, through the disk
// cache) without and with Options.Leases, alternating the two on one
// cluster so that both see the same load: it reports each one's
// milliseconds per write (off-ms/write, on-ms/write) and their ratio.
// The intents cost one more transaction per write (up to 64 blobs each)
// and a compare and a delete per blob in the write's own transaction.
// "new" writes content never seen (every block uploaded), "same" writes
// the same 1 MiB again (every block found in the bucket, none uploaded).
func BenchmarkCrossSweepWrite(b *testing.B) {
	cluster := etcdtest.StartCluster(b, etcdtest.Options{})
	srv := testbin.StartS3(b)
	var n atomic.Int64
	open := func(b *testing.B, leased bool) (*View, InodeID) {
		prefix := fmt.Sprintf("xbench%d/", n.Add(1))
		st := cluster.NewStore(b, etcdkv.Options{Prefix: "/" + prefix})
		raw, err := blobs.OpenS3(b.Context(), blobs.S3Options{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: prefix, Insecure: true,
			Region: "us-east-1", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, RetryFor: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { raw.Close() })
		cache, err := blobs.OpenCache(raw, blobs.CacheOptions{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cache.Close() })
		opts := Options{Blobs: cache}
		if leased {
			opts.Leases = cluster.NewCoord(b, etcdkv.Options{Prefix: "/" + prefix}).ServerLease(0)
		}
		s, err := Open(b.Context(), st, opts)
		if err != nil {
			b.Fatal(err)
		}
		l, err := s.NewTree(b.Context(), 0o755, 0, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		v := s.View([]LayerID{l})
		a, err := v.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			b.Fatal(err)
		}
		return v, a.Ino
	}
	for _, op := range []string{"new", "same"} {
		b.Run("op="+op, func(b *testing.B) {
			off, offIno := open(b, false)
			on, onIno := open(b, true)
			data := randBytes(rand.New(rand.NewPCG(7, 7)), 1<<20)
			var took [2]time.Duration
			b.SetBytes(2 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, v := range []*View{off, on} {
					if op == "new" {
						for blk := 0; blk < len(data); blk += 32 << 10 {
							binary.LittleEndian.PutUint64(data[blk:], uint64(2*i+j)) // every block new
						}
					}
					ino := offIno
					if j == 1 {
						ino = onIno
					}
					t0 := time.Now()
					if _, err := v.WriteAt(ino, data, 0); err != nil {
						b.Fatal(err)
					}
					took[j] += time.Since(t0)
				}
			}
			b.ReportMetric(float64(took[0].Microseconds())/1000/float64(b.N), "off-ms/write")
			b.ReportMetric(float64(took[1].Microseconds())/1000/float64(b.N), "on-ms/write")
			b.ReportMetric(float64(took[1])/float64(took[0]), "on/off")
		})
	}
}
